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

torch::Tensor SdrScores(const SentenceVectors& source, const std::vector<SentenceVectors>& candidates, bool normalize) {
  torch::NoGradGuard no_grad;
  const int64_t C = static_cast<int64_t>(candidates.size());
  if (C == 0) return torch::empty({0}, source.vectors.options());
  // Every candidate sentence in one matrix, with its paragraph (over all
  // candidates) and each paragraph with its candidate.
  std::vector<torch::Tensor> pool;
  std::vector<int64_t> sentence_paragraph, paragraph_candidate;
  for (int64_t c = 0; c < C; ++c) {
    pool.push_back(candidates[c].vectors);
    const int64_t base = static_cast<int64_t>(paragraph_candidate.size());
    SegmentIds(candidates[c].paragraph_offsets, base, &sentence_paragraph);
    paragraph_candidate.insert(paragraph_candidate.end(), candidates[c].paragraph_offsets.size() - 1, c);
  }
  const auto unit = F::NormalizeFuncOptions().dim(-1);
  const torch::Tensor similarity =
      torch::matmul(F::normalize(source.vectors, unit), F::normalize(torch::cat(pool), unit).t());  // (S_s, S_all)
  const int64_t Ss = similarity.size(0), Pall = static_cast<int64_t>(paragraph_candidate.size());
  const auto options = torch::TensorOptions().dtype(torch::kLong);
  // 1. Max over each candidate paragraph's sentences: (S_s, P_all).
  const torch::Tensor columns = torch::tensor(sentence_paragraph, options).unsqueeze(0).expand({Ss, -1});
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
  // 2. Optionally z-score each source paragraph over all candidate paragraphs.
  if (normalize) {
    const torch::Tensor mean = paragraphs.mean(1, /*keepdim=*/true);
    const torch::Tensor std = paragraphs.std(1, /*unbiased=*/false, /*keepdim=*/true).clamp_min(1e-12);
    paragraphs = (paragraphs - mean) / std;
  }
  // 3. Max over each candidate's paragraphs, mean over the source's: (C,).
  const torch::Tensor owners = torch::tensor(paragraph_candidate, options).unsqueeze(0).expand({Ps, -1});
  const torch::Tensor per_candidate =
      torch::full({Ps, C}, -std::numeric_limits<double>::infinity(), similarity.options())
          .scatter_reduce(1, owners, paragraphs, "amax", /*include_self=*/true);
  return per_candidate.mean(0);
}

double SdrPairScore(const SentenceVectors& source, const SentenceVectors& target,
                    const std::vector<SentenceVectors>& pool, bool normalize) {
  std::vector<SentenceVectors> candidates = pool;
  candidates.push_back(target);
  return SdrScores(source, candidates, normalize)[-1].item<double>();
}

}  // namespace docmatch::eval
