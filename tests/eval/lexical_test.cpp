// The TF-IDF index of hybrid retrieval against a dense float64 formulation
// built another way (count matrix, then whole-matrix operations).
#include "eval/lexical.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
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

  // A text query (token ids not in the index): a corpus document's own tokens
  // score as the document does; a made-up text against the same dense
  // formulation, its unseen token ignored and its repeated token's tf
  // sublinear.
  const std::vector<int32_t> own = corpus.Get(5).tokens;
  const torch::Tensor unused = df.eq(0).nonzero();
  ASSERT_GT(unused.size(0), 0) << "the synthetic corpus should leave some vocabulary pieces unused";
  const auto unseen = static_cast<int32_t>(unused[0][0].item<int64_t>());
  const std::vector<int32_t> made_up = {own[0], own[0], own[0], own[1], unseen};
  const torch::Tensor text_scores = index.ScoresOfTokens({own, made_up});
  EXPECT_TRUE(torch::allclose(text_scores[0], expected[5], 0, 1e-12));
  torch::Tensor q = torch::zeros({V}, torch::kFloat64);
  q[own[0]] += (1 + std::log(3.0)) * idf[own[0]].item<double>();
  q[own[1]] += idf[own[1]].item<double>();
  if (own[0] == own[1]) q[own[0]] = (1 + std::log(4.0)) * idf[own[0]].item<double>();
  q = q / q.norm();
  EXPECT_TRUE(torch::allclose(text_scores[1], torch::matmul(x, q), 0, 1e-12));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace docmatch::eval
