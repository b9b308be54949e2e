// TF-IDF-mined hard negatives (mined_negatives.h).
#include "train/mined_negatives.h"

#include <algorithm>
#include <unordered_set>

#include "train/objectives.h"

namespace docmatch::train {

MinedNegatives MineLexicalNegatives(const eval::LexicalIndex& index, const std::vector<data::LabelledPair>& pairs,
                                    int64_t count, double margin) {
  return MineNegatives([&](const std::vector<int64_t>& sources) { return index.Scores(sources); }, index.size(), pairs,
                       count, margin);
}

MinedNegatives MineDenseNegatives(const torch::Tensor& vectors, const std::vector<data::LabelledPair>& pairs,
                                  int64_t count, double margin) {
  namespace F = torch::nn::functional;
  const torch::Tensor unit = F::normalize(vectors.to(torch::kCPU, torch::kFloat64), F::NormalizeFuncOptions().dim(1));
  return MineNegatives(
      [&](const std::vector<int64_t>& sources) {
        return unit.index_select(0, torch::tensor(sources, torch::kLong)).mm(unit.t());  // (Q, N)
      },
      unit.size(0), pairs, count, margin);
}

MinedNegatives MineNegatives(const std::function<torch::Tensor(const std::vector<int64_t>&)>& scores_of, int64_t N,
                             const std::vector<data::LabelledPair>& pairs, int64_t count, double margin) {
  MinedNegatives mined;
  if (count <= 0) return mined;
  const RelatedPairs related(pairs);
  std::vector<int64_t> sources;
  for (const data::LabelledPair& p : pairs) {
    if (p.label == 1) sources.push_back(p.source);  // deduplicated below
  }
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  mined.sources = static_cast<int64_t>(sources.size());
  // Sources scored at a time: a (Q, N) float64 block of cosines near 256 MB.
  const size_t at_once = static_cast<size_t>(std::clamp<int64_t>((int64_t{1} << 25) / std::max<int64_t>(1, N), 1, 256));
  for (size_t first = 0; first < sources.size(); first += at_once) {
    const std::vector<int64_t> chunk(sources.begin() + first,
                                     sources.begin() + std::min(sources.size(), first + at_once));
    const torch::Tensor scores = scores_of(chunk).to(torch::kFloat64).contiguous();  // (Q, N)
    for (size_t q = 0; q < chunk.size(); ++q) {
      const int64_t source = chunk[q];
      const double* row = scores.data_ptr<double>() + static_cast<int64_t>(q) * N;
      const std::unordered_set<int64_t>& positives = related.Of(source);
      double best_positive = 0;
      for (int64_t t : positives) best_positive = std::max(best_positive, row[t]);
      // Enough of the nearest to fill `count` after what the filters drop
      // (ties in document order).
      std::vector<int64_t> order(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) order[static_cast<size_t>(i)] = i;
      auto nearer = [row](int64_t a, int64_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; };
      std::vector<int64_t>& kept = mined.by_source[source];
      size_t sorted = 0;
      for (size_t i = 0; i < order.size() && static_cast<int64_t>(kept.size()) < count; ++i) {
        if (i == sorted) {  // sort the next stretch of the ranking only when it is reached
          const size_t end = std::min(order.size(), sorted + static_cast<size_t>(4 * count + 16));
          std::partial_sort(order.begin() + sorted, order.begin() + end, order.end(), nearer);
          sorted = end;
        }
        const int64_t candidate = order[i];
        if (candidate == source) continue;
        if (positives.count(candidate)) {
          ++mined.dropped_related;
        } else if (margin >= 0 && row[candidate] > best_positive + margin) {
          ++mined.dropped_margin;
        } else {
          kept.push_back(candidate);
        }
      }
    }
  }
  return mined;
}

}  // namespace docmatch::train
