// SDR's sentence-to-paragraph-to-document score, with the optional z-score over
// candidates (sdr_scoring.h).
#include "eval/sdr_scoring.h"

namespace docmatch::eval {
namespace {

namespace F = torch::nn::functional;

// Appends, for every row of the consecutive segments given by `offsets`, the
// id of its segment (first_id, first_id + 1, ...).
void SegmentIds(const std::vector<int64_t>& offsets, int64_t first_id, std::vector<int64_t>* ids) {
  for (size_t p = 0; p + 1 < offsets.size(); ++p)
    ids->insert(ids->end(), offsets[p + 1] - offsets[p], first_id + static_cast<int64_t>(p));
}

}  // namespace

SentencePool::SentencePool(const std::vector<SentenceVectors>& candidates)
    : candidates_(static_cast<int64_t>(candidates.size())) {
  torch::NoGradGuard no_grad;
  if (candidates_ == 0) return;
  std::vector<torch::Tensor> pool;
  std::vector<int64_t> sentence_paragraph, paragraph_candidate;
  for (int64_t c = 0; c < candidates_; ++c) {
    pool.push_back(candidates[c].vectors);
    const int64_t base = static_cast<int64_t>(paragraph_candidate.size());
    SegmentIds(candidates[c].paragraph_offsets, base, &sentence_paragraph);
    paragraph_candidate.insert(paragraph_candidate.end(), candidates[c].paragraph_offsets.size() - 1, c);
  }
  unit_ = F::normalize(torch::cat(pool), F::NormalizeFuncOptions().dim(-1));
  sentence_paragraph_ = torch::tensor(sentence_paragraph, torch::kLong);
  paragraph_candidate_ = torch::tensor(paragraph_candidate, torch::kLong);
}

torch::Tensor SentencePool::Scores(const SentenceVectors& source, bool normalize, int64_t exclude) const {
  return Scores(std::vector<const SentenceVectors*>{&source}, normalize, {exclude})[0];
}

std::vector<torch::Tensor> SentencePool::Scores(const std::vector<const SentenceVectors*>& sources, bool normalize,
                                                const std::vector<int64_t>& exclude) const {
  TORCH_CHECK(exclude.empty() || exclude.size() == sources.size(), "SentencePool: one exclusion per source, or none");
  torch::NoGradGuard no_grad;
  constexpr int64_t kRows = 256;  // source sentences a product: (256, S_all) cosines, 79 MB at Wikipedia's windows
  std::vector<torch::Tensor> out;
  for (size_t next = 0; next < sources.size();) {
    if (candidates_ == 0) {
      out.push_back(torch::empty({0}, sources[next++]->vectors.options()));
      continue;
    }
    std::vector<torch::Tensor> rows;
    int64_t count = 0;
    size_t end = next;
    for (; end < sources.size() && (end == next || count + sources[end]->vectors.size(0) <= kRows); ++end) {
      rows.push_back(sources[end]->vectors);
      count += sources[end]->vectors.size(0);
    }
    const torch::Tensor similarity =
        torch::matmul(F::normalize(torch::cat(rows), F::NormalizeFuncOptions().dim(-1)), unit_.t());  // (rows, S_all)
    for (int64_t row = 0; next < end; ++next) {
      const int64_t n = sources[next]->vectors.size(0);
      out.push_back(
          Reduce(similarity.narrow(0, row, n), *sources[next], normalize, exclude.empty() ? -1 : exclude[next]));
      row += n;
    }
  }
  return out;
}

torch::Tensor SentencePool::Reduce(const torch::Tensor& similarity, const SentenceVectors& source, bool normalize,
                                   int64_t exclude) const {
  const int64_t Ss = similarity.size(0), Pall = paragraph_candidate_.size(0);
  const auto options = torch::TensorOptions().dtype(torch::kLong);
  // 1. Max over each candidate paragraph's sentences: (S_s, P_all).
  const torch::Tensor columns = sentence_paragraph_.unsqueeze(0).expand({Ss, -1});
  const torch::Tensor best = torch::full({Ss, Pall}, -std::numeric_limits<double>::infinity(), similarity.options())
                                 .scatter_reduce(1, columns, similarity, "amax", /*include_self=*/true);
  //    then the mean over each source paragraph's sentences: (P_s, P_all).
  std::vector<int64_t> source_paragraph;
  SegmentIds(source.paragraph_offsets, 0, &source_paragraph);
  const int64_t Ps = static_cast<int64_t>(source.paragraph_offsets.size()) - 1;
  const torch::Tensor rows = torch::tensor(source_paragraph, options);
  const torch::Tensor counts =
      torch::zeros({Ps}, similarity.options()).index_add(0, rows, torch::ones({Ss}, similarity.options()));
  torch::Tensor paragraphs =
      torch::zeros({Ps, Pall}, similarity.options()).index_add(0, rows, best) / counts.clamp_min(1).unsqueeze(1);
  // 2. Optionally z-score each source paragraph over all candidate paragraphs
  //    (but the excluded candidate's).
  if (normalize) {
    const torch::Tensor counted =
        exclude < 0 ? paragraphs : paragraphs.index({torch::indexing::Slice(), paragraph_candidate_.ne(exclude)});
    const torch::Tensor mean = counted.mean(1, /*keepdim=*/true);
    const torch::Tensor std = counted.std(1, /*unbiased=*/false, /*keepdim=*/true).clamp_min(1e-12);
    paragraphs = (paragraphs - mean) / std;
  }
  // 3. Max over each candidate's paragraphs, mean over the source's: (C,).
  const torch::Tensor owners = paragraph_candidate_.unsqueeze(0).expand({Ps, -1});
  const torch::Tensor per_candidate =
      torch::full({Ps, candidates_}, -std::numeric_limits<double>::infinity(), similarity.options())
          .scatter_reduce(1, owners, paragraphs, "amax", /*include_self=*/true);
  return per_candidate.mean(0);
}

torch::Tensor SdrScores(const SentenceVectors& source, const std::vector<SentenceVectors>& candidates, bool normalize) {
  return SentencePool(candidates).Scores(source, normalize);
}

double SdrPairScore(const SentenceVectors& source, const SentenceVectors& target,
                    const std::vector<SentenceVectors>& pool, bool normalize) {
  std::vector<SentenceVectors> candidates = pool;
  candidates.push_back(target);
  return SdrScores(source, candidates, normalize)[-1].item<double>();
}

}  // namespace docmatch::eval
