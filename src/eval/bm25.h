// BM25 over a corpus's words (data/corpus/word_counts.h), scored as Lucene
// 8+, Anserini/Pyserini and bm25s's "lucene" method score it:
//
//   idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
//   score(q, d) = sum over the words t of q:
//                   qtf(t) * idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
//
// N documents, df(t) those holding t, tf(t, d) its count in d, |d| d's words,
// avgdl their mean; qtf(t) the count of t in the query (a document as a
// query: its own counts, as a query of its words one by one sums them). A
// word the corpus lacks adds nothing. k1 = 1.2, b = 0.75 are Lucene's and
// Elasticsearch's defaults.
//
// The index is inverted (each word's documents with their precomputed
// tf / (tf + k1 * norm(d)) parts), so a query costs the postings of its own
// words. Scores are unbounded: fusing them with cosines needs a
// normalisation (evaluate.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data/corpus/word_counts.h"

namespace docmatch::eval {

struct Bm25Parameters {
  double k1 = 1.2;
  double b = 0.75;
};

class Bm25Index {
 public:
  Bm25Index(std::shared_ptr<const data::WordCounts> words, Bm25Parameters parameters);

  int64_t size() const { return words_->num_documents(); }
  const Bm25Parameters& parameters() const { return parameters_; }
  double idf(int32_t word) const { return idf_[word]; }
  // Scores (Q, N) float64 of the corpus's documents `queries` against every document.
  torch::Tensor Scores(const std::vector<int64_t>& queries) const;
  // BM25 of document `query` against document `document` alone (a merge of
  // their sorted words): a pair's score without a whole row.
  double Score(int64_t query, int64_t document) const;
  // Scores (Q, N) float64 of word bags from elsewhere (another corpus's
  // documents, a text's words counted by data::CountWords).
  torch::Tensor ScoresOfBags(const std::vector<data::WordBag>& bags) const;

 private:
  // Adds weight * (the word's part in each document) to `row` (N,).
  void AddWord(int32_t word, double weight, double* row) const;

  std::shared_ptr<const data::WordCounts> words_;
  Bm25Parameters parameters_;
  std::vector<double> idf_;             // (W,)
  std::vector<double> norm_;            // (N,) k1 * (1 - b + b * |d| / avgdl)
  std::vector<int64_t> word_begin_;     // (W + 1,) into the postings
  std::vector<int32_t> post_document_;  // documents holding each word, ascending
  std::vector<double> post_part_;       // tf / (tf + k1 * (1 - b + b * |d| / avgdl))
};

// BM25 rows (Q, N) brought to [0, 1] in place, each by the min and max over
// its documents other than the query's own (self[q]; -1 when the query is
// not one of them), for fusing with cosines: w then weighs alike whatever a
// query's length. A row whose candidates all score alike becomes 0.
torch::Tensor MinMaxPerQuery(torch::Tensor rows, const std::vector<int64_t>& self);

}  // namespace docmatch::eval
