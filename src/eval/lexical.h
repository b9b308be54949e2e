// The lexical side of hybrid retrieval: every document of a corpus as a
// TF-IDF vector over its token ids, defined as scikit-learn's
// TfidfVectorizer(sublinear_tf=True) defines it:
//
//   tf(t, d)  = 1 + ln(count of t in d)
//   idf(t)    = ln((1 + N) / (1 + df(t))) + 1      (smoothed; N documents)
//   vector(d) = tf * idf over d's distinct tokens, L2-normalised
//
// so the score of two documents is the cosine of their vectors, in [0, 1].
// The vectors are sparse (rows of (token, weight), CSR layout): memory grows
// with the corpus's distinct (document, token) pairs, not with documents x
// vocabulary.
//
// eval fuses it with the dense cosine (evaluate.h, --lexical-weight w):
//   score = (1 - w) * cos(dense) + w * cos(TF-IDF)
// w = 0.5 scores what the cosine of the two unit vectors concatenated scores.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "data/corpus/corpus.h"

namespace docmatch::eval {

class LexicalIndex {
 public:
  // Reads every document of `corpus` once.
  LexicalIndex(const data::Corpus& corpus, bool progress);

  int64_t size() const { return static_cast<int64_t>(row_begin_.size()) - 1; }
  // Cosines (Q, N) float64 of documents `queries` against every document.
  torch::Tensor Scores(const std::vector<int64_t>& queries) const;
  // Cosines (Q, N) float64 of token sequences that are not in the corpus (a
  // text query, tokenized as the corpus was) against every document, with the
  // corpus's idf.
  torch::Tensor ScoresOfTokens(const std::vector<std::vector<int32_t>>& texts) const;
  // Cosine of documents a and b.
  double Score(int64_t a, int64_t b) const;

 private:
  double Idf(int64_t token) const;
  // Scores (Q, N) of Q sparse unit rows, row q given by query_row(q, put)
  // calling put(token, weight) for each of its entries.
  torch::Tensor Against(
      int64_t Q, const std::function<void(int64_t, const std::function<void(int64_t, double)>&)>& query_row) const;

  int64_t vocab_ = 0;
  std::vector<int64_t> df_;         // (V,) documents holding each token
  std::vector<int64_t> row_begin_;  // (N + 1,) CSR row offsets
  std::vector<int64_t> columns_;    // token ids, ascending within a row
  std::vector<double> values_;      // unit-row TF-IDF weights
};

}  // namespace docmatch::eval
