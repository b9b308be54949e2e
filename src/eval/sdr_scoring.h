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
