// SDR's two-stage hierarchical document score (Ginzburg et al. 2021, §3.3).
//
//  1. For each candidate c and each pair of paragraphs (p of the source, q of
//     c): the sentence cosine matrix, reduced to a paragraph score by the max
//     over q's sentences averaged over p's sentences.
//  2. Optionally (the paper's normalisation; the authors' public code omits
//     it), each source paragraph's scores are z-scored over all paragraphs of
//     all candidates, so a paragraph that matches everything counts less.
//  3. The document score: max over c's paragraphs, averaged over the source's.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/document_model.h"

namespace docmatch::eval {

// A document as SDR scores it: sentence vectors and their paragraphs.
using SentenceVectors = model::DocumentSentences;

// Candidates prepared once for many sources: their unit sentence vectors in
// one matrix, each sentence's paragraph and each paragraph's candidate. A
// ranking scores every query against the same corpus; building this per
// query copied and normalised every candidate sentence again (on Wikipedia's
// 77,567 fused MaxSim windows of 768 floats, 238 MB a query).
class SentencePool {
 public:
  explicit SentencePool(const std::vector<SentenceVectors>& candidates);
  // Scores (candidates,) of `source`. `exclude` (a candidate's index, or -1)
  // leaves that candidate's paragraphs out of the z-score's mean and spread,
  // as if it were not in the pool (a query ranked against the rest of its
  // own corpus); its own score is still computed.
  torch::Tensor Scores(const SentenceVectors& source, bool normalize, int64_t exclude = -1) const;
  // The same for many sources (exclude: empty, or one per source). Their
  // sentences meet the pool in one matrix product per few hundred rows: a
  // product packs the pool's matrix (on Wikipedia's windows, most of a
  // query's time), so a ranking's queries share that work.
  std::vector<torch::Tensor> Scores(const std::vector<const SentenceVectors*>& sources, bool normalize,
                                    const std::vector<int64_t>& exclude = {}) const;
  int64_t size() const { return candidates_; }

 private:
  // Steps 1-3 for one source, from its rows of the sentence cosines (S_s, S_all).
  torch::Tensor Reduce(const torch::Tensor& similarity, const SentenceVectors& source, bool normalize,
                       int64_t exclude) const;

  int64_t candidates_ = 0;
  torch::Tensor unit_;                 // (S_all, D)
  torch::Tensor sentence_paragraph_;   // (S_all,) over all candidates' paragraphs
  torch::Tensor paragraph_candidate_;  // (P_all,)
};

// Scores (candidates,) of `source` against each candidate.
torch::Tensor SdrScores(const SentenceVectors& source, const std::vector<SentenceVectors>& candidates, bool normalize);

// One pair's score. Normalised, a score only means something among
// candidates: alone, a one-paragraph target's paragraph scores have no
// spread and it scores exactly 0. So the target is scored among `pool`
// (other documents, the same for every pair), as the paper scores a
// candidate among the others.
double SdrPairScore(const SentenceVectors& source, const SentenceVectors& target,
                    const std::vector<SentenceVectors>& pool, bool normalize);

}  // namespace docmatch::eval
