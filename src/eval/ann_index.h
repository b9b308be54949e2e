// An approximate nearest-neighbour index over an embeddings file, for
// `docmatch index` and `search --ann`: hnswlib's HNSW graph over the unit
// vectors, inner product (= cosine). Exact search reads every vector for
// every pass; the graph visits a few thousand per query, at a recall below 1
// that `ef` (candidates kept while searching) trades against time
// (bench/NOTES.md, Approximate search).
//
// Files: <path> is hnswlib's own format; <path>.json records what it was
// built from (rows, dimension, the embeddings file's bytes, a hash of its ids
// and of 64 rows spread over it, M, ef_construction, the index file's bytes),
// so a stale, truncated or foreign index is refused, naming the file, instead
// of answering for other vectors.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "eval/embeddings.h"

namespace hnswlib {
template <typename T>
class HierarchicalNSW;
class InnerProductSpace;
}  // namespace hnswlib

namespace docmatch::eval {

struct AnnBuildOptions {
  int64_t m = 16;                 // graph degree (hnswlib's M)
  int64_t ef_construction = 200;  // candidates kept while inserting
  int threads = 0;                // 0: every core
  bool progress = true;
  uint64_t seed = 100;
};

class AnnIndex {
 public:
  // Builds the index of every row of `file` and writes it to `path` (and
  // `path`.json), through temporary names.
  static void Build(const EmbeddingFile& file, const std::string& path, const AnnBuildOptions& options);
  // The default index path of an embeddings file: <embeddings>.hnsw.
  static std::string DefaultPath(const std::string& embeddings) { return embeddings + ".hnsw"; }

  // Loads `path`, checking it was built from `file` as it is now.
  AnnIndex(const std::string& path, const EmbeddingFile& file);
  ~AnnIndex();

  // For each row of `queries` (Q, D) the `k` rows of highest cosine, best
  // first, as (row, cosine); `skip[q]` (a row, or -1) is left out.
  std::vector<std::vector<std::pair<int64_t, double>>> Search(const torch::Tensor& queries, int64_t k, int64_t ef,
                                                              const std::vector<int64_t>& skip) const;

 private:
  std::unique_ptr<hnswlib::InnerProductSpace> space_;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph_;
};

}  // namespace docmatch::eval
