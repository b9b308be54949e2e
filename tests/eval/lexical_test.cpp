// The TF-IDF index of hybrid retrieval against a dense float64 formulation
// built another way (count matrix, then whole-matrix operations).
#include "eval/lexical.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../data/test_corpus.h"

namespace docmatch::eval {
namespace {

TEST(LexicalIndex, EqualsADenseTfIdfCosineInFloat64) {
  const std::string dir = ::testing::TempDir() + "docmatch-lexical-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  data::testing::WriteSyntheticCorpus(dir, {7, 6});
  const data::Corpus corpus(dir);
  const int64_t N = corpus.num_documents(), V = corpus.manifest().vocab_size;
  const LexicalIndex index(corpus, /*progress=*/false);
  ASSERT_EQ(index.size(), N);

  // Count matrix, then sklearn's definition as matrix operations.
  torch::Tensor counts = torch::zeros({N, V}, torch::kFloat64);
  for (int64_t d = 0; d < N; ++d) {
    for (int32_t t : corpus.Get(d).tokens) counts[d][t] += 1;
  }
  const torch::Tensor present = counts.gt(0);
  const torch::Tensor tf = torch::where(present, 1 + torch::log(counts.clamp_min(1)), torch::zeros_like(counts));
  const torch::Tensor df = present.to(torch::kFloat64).sum(0);
  const torch::Tensor idf = torch::log((1.0 + N) / (1.0 + df)) + 1;
  torch::Tensor x = tf * idf.unsqueeze(0);
  x = x / x.norm(2, 1, true);
  const torch::Tensor expected = torch::matmul(x, x.t());

  const std::vector<int64_t> queries = {0, 5, 12, 3};
  const torch::Tensor scores = index.Scores(queries);
  ASSERT_EQ(scores.sizes(), (std::vector<int64_t>{4, N}));
  for (size_t q = 0; q < queries.size(); ++q) {
    EXPECT_TRUE(torch::allclose(scores[q], expected[queries[q]], 0, 1e-12)) << queries[q];
    EXPECT_NEAR(scores[q][queries[q]].item<double>(), 1.0, 1e-12);  // a document is its own best match
    for (int64_t d = 0; d < N; ++d) {
      EXPECT_NEAR(index.Score(queries[q], d), expected[queries[q]][d].item<double>(), 1e-12);
    }
  }
  // More queries than one product block (64) give the same rows.
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 150; ++i) many.push_back(i % N);
  const torch::Tensor blocked = index.Scores(many);
  EXPECT_TRUE(torch::allclose(blocked[149], expected[149 % N], 0, 1e-12));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace docmatch::eval
