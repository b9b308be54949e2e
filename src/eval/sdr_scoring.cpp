#include "eval/sdr_scoring.h"

namespace docmatch::eval {
namespace {

namespace F = torch::nn::functional;

// (P_s, P_c) paragraph scores: mean over source sentences of the max over
// candidate sentences, per paragraph pair.
torch::Tensor ParagraphMatrix(const SentenceVectors& source, const SentenceVectors& candidate) {
  const auto unit = F::NormalizeFuncOptions().dim(-1);
  const torch::Tensor similarity =
      torch::matmul(F::normalize(source.vectors, unit), F::normalize(candidate.vectors, unit).t());  // (S_s, S_c)
  const int64_t Ps = static_cast<int64_t>(source.paragraph_offsets.size()) - 1;
  const int64_t Pc = static_cast<int64_t>(candidate.paragraph_offsets.size()) - 1;
  torch::Tensor matrix = torch::empty({Ps, Pc}, similarity.options());
  for (int64_t q = 0; q < Pc; ++q) {
    // Max over q's sentences for every source sentence, then mean per source paragraph.
    const torch::Tensor best = std::get<0>(
        similarity.slice(1, candidate.paragraph_offsets[q], candidate.paragraph_offsets[q + 1]).max(1));  // (S_s,)
    for (int64_t p = 0; p < Ps; ++p) {
      matrix[p][q] = best.slice(0, source.paragraph_offsets[p], source.paragraph_offsets[p + 1]).mean();
    }
  }
  return matrix;
}

}  // namespace

torch::Tensor SdrScores(const SentenceVectors& source, const std::vector<SentenceVectors>& candidates, bool normalize) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> matrices;
  for (const auto& candidate : candidates) matrices.push_back(ParagraphMatrix(source, candidate));
  if (normalize && !matrices.empty()) {
    // Per source paragraph, over every paragraph of every candidate.
    const torch::Tensor all = torch::cat(matrices, 1);  // (P_s, sum P_c)
    const torch::Tensor mean = all.mean(1, /*keepdim=*/true);
    const torch::Tensor std = all.std(1, /*unbiased=*/false, /*keepdim=*/true).clamp_min(1e-12);
    for (auto& m : matrices) m = (m - mean) / std;
  }
  torch::Tensor scores = torch::empty({static_cast<int64_t>(candidates.size())}, source.vectors.options());
  for (size_t c = 0; c < matrices.size(); ++c) scores[c] = std::get<0>(matrices[c].max(1)).mean();
  return scores;
}

}  // namespace docmatch::eval
