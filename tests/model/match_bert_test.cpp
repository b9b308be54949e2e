// MatchBERT: the flat batch, shapes, padding invariance, gradients.
#include "model/match_bert.h"

#include <gtest/gtest.h>

#include "../data/test_corpus.h"
#include "data/tokenizer.h"
#include "model/losses.h"

namespace docmatch::model {
namespace {

MatchBertConfig Tiny() {
  MatchBertConfig c;
  c.vocab_size = 1005;
  c.hidden = 16;
  c.heads = 2;
  c.intermediate = 32;
  c.layers = 2;
  c.max_tokens = 24;
  c.dropout = 0.0;
  return c;
}

TEST(FlatBatch, TakesClsAndTheFirstTokens) {
  const data::Document a = data::testing::SyntheticDocument(0), b = data::testing::SyntheticDocument(1);
  const data::FlatBatch batch = data::BuildFlatBatch({&a, &b}, /*max_tokens=*/8);
  ASSERT_EQ(batch.T, std::min<int64_t>(8, 1 + std::max(a.num_tokens(), b.num_tokens())));
  EXPECT_EQ(batch.tokens[0], data::kClsId);
  for (int64_t t = 1; t < batch.T && t <= a.num_tokens(); ++t) EXPECT_EQ(batch.tokens[t], a.tokens[t - 1]);
  const data::Document tiny = [] {
    data::Document d;
    d.tokens = {42};
    d.sentence_offsets = {0, 1};
    d.paragraph_offsets = {0, 1};
    return d;
  }();
  const data::FlatBatch padded = data::BuildFlatBatch({&a, &tiny}, 8);
  EXPECT_EQ(padded.tokens[padded.T + 1], 42);
  EXPECT_EQ(padded.tokens[padded.T + 2], data::kPadId);
}

TEST(MatchBert, ShapesPaddingInvarianceAndGradients) {
  torch::manual_seed(0);
  const MatchBertConfig c = Tiny();
  FlatEncoder encoder(c);
  encoder->eval();
  std::vector<data::Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(data::testing::SyntheticDocument(i));
  const data::FlatBatch batch = data::BuildFlatBatch({&docs[0], &docs[1], &docs[2], &docs[3]}, c.max_tokens);
  const torch::Tensor tokens = ToTensor(batch, torch::kCPU);
  const torch::Tensor vectors = encoder(tokens);
  EXPECT_EQ(vectors.sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_TRUE(torch::allclose(vectors.norm(2, 1), torch::ones({4}), 1e-5, 1e-5));
  // Extra padding and batch mates change nothing.
  const torch::Tensor padded = torch::constant_pad_nd(tokens, {0, c.max_tokens - tokens.size(1)}, data::kPadId);
  EXPECT_TRUE(torch::allclose(encoder(padded), vectors, 1e-5, 1e-6));
  const data::FlatBatch alone = data::BuildFlatBatch({&docs[1]}, c.max_tokens);
  EXPECT_TRUE(torch::allclose(encoder(ToTensor(alone, torch::kCPU))[0], vectors[1], 1e-5, 1e-6));

  encoder->train();
  const torch::Tensor loss = SiameseCosineLoss(encoder(tokens.slice(0, 0, 2)), encoder(tokens.slice(0, 2, 4)),
                                               torch::tensor({1.0, 0.0}), c.amplifier);
  loss.backward();
  for (const auto& p : encoder->named_parameters()) {
    // Position embeddings past the batch's length get no gradient, by design.
    if (p.key() == "embeddings.positions.weight") continue;
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

}  // namespace
}  // namespace docmatch::model
