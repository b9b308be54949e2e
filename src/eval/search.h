// `docmatch search`: the documents of an embeddings file nearest to queries
// given as documents of that file or as text.
//
// Exact search: every query against every row, a block of rows at a time, so
// memory is bounded by the block and the queries, not the corpus. The score
// is the one `eval` ranks with:
//   cosine kinds (SMITH, MatchBERT; vectors from elsewhere)  cosine, float64
//   SMASH / HAN                                              the pair head
//   SDR   the cosine of the mean sentence vectors picks `rerank` candidates,
//         SDR's hierarchical score (eval/sdr_scoring.h) orders them
//   MatchBERT maxsim (and files fused from one): the cosine of the mean
//         window vectors picks `rerank` candidates, MaxSim over the windows
//         (never z-scored) orders them
// and with a lexical index, (1 - w) * cosine + w * TF-IDF cosine, or
// + w * BM25 normalised per query (hybrid, as eval --lexical-weight).
//
// Approximate search (an AnnIndex, `docmatch index`): the graph gives each
// query its best cosines without reading every row (SDR: the candidates its
// hierarchical score then orders); cosine scores only, no hybrid.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "data/corpus/document.h"
#include "eval/ann_index.h"
#include "eval/bm25.h"
#include "eval/embeddings.h"
#include "eval/lexical.h"
#include "model/document_model.h"

namespace docmatch::eval {

struct SearchQuery {
  std::string label;    // how the output names it: the id, or the text's
  int64_t row = -1;     // a row of the embeddings file, or -1 for a text
  data::Document text;  // the text, tokenized (row == -1)
  data::WordBag words;  // the text's words, for BM25 (row == -1)
};

struct SearchHit {
  int64_t row = 0;  // in the embeddings file
  double score = 0;
};

struct SearchOptions {
  int64_t top = 10;
  bool exclude_self = false;        // a document query leaves itself out
  double lexical_weight = 0;        // hybrid: share of the lexical score (needs `lexical` or `bm25`)
  const Bm25Index* bm25 = nullptr;  // hybrid with BM25 (min-max per query) instead of the TF-IDF cosine
  int64_t rerank = 100;             // SDR: candidates the hierarchical score orders
  bool sdr_normalize = true;        // SDR: the paper's z-score over those candidates
  int64_t block_rows = 16384;       // rows scored at a time
  const AnnIndex* index = nullptr;  // approximate: candidates from the HNSW graph instead of every row
  int64_t ef = 128;                 // with `index`: candidates kept while searching (recall vs time)
  int64_t batch_size = 16;          // text queries embedded at a time (embed's --batch-size)
};

class Searcher {
 public:
  // `model` may be null when every query is a row and the file's score is a
  // cosine; `lexical`, when given, indexes the same documents in the same
  // order as the file.
  Searcher(const EmbeddingFile& file, model::DocumentModel* model, const LexicalIndex* lexical, SearchOptions options,
           torch::Device device = torch::kCPU);

  // The best `top` rows for each query, best first.
  std::vector<std::vector<SearchHit>> Search(const std::vector<SearchQuery>& queries) const;

 private:
  // (Q, D) vectors of a batch of queries, and (SDR) their sentence vectors.
  torch::Tensor QueryVectors(const std::vector<SearchQuery>& queries,
                             std::vector<model::DocumentSentences>* sentences) const;
  // (Q, N) TF-IDF cosines of the queries against every document.
  torch::Tensor LexicalScores(const std::vector<SearchQuery>& queries) const;
  // (Q, B) scores of the queries against rows [begin, end).
  torch::Tensor BlockScores(const torch::Tensor& queries, const torch::Tensor& lexical, int64_t begin,
                            int64_t end) const;
  // Each query's best `pool` rows (unordered, the query's own row left out
  // with exclude_self): every block of the file scored, or the index's graph.
  std::vector<std::vector<SearchHit>> ExactCandidates(const std::vector<SearchQuery>& batch,
                                                      const torch::Tensor& vectors, const torch::Tensor& lexical,
                                                      int64_t pool) const;
  std::vector<std::vector<SearchHit>> IndexCandidates(const std::vector<SearchQuery>& batch,
                                                      const torch::Tensor& vectors, int64_t pool) const;

  const EmbeddingFile& file_;
  model::DocumentModel* model_;
  const LexicalIndex* lexical_;
  SearchOptions options_;
  torch::Device device_;
  bool cosine_;
};

}  // namespace docmatch::eval
