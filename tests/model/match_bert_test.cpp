// MatchBERT: the flat batch, shapes, padding invariance, gradients.
#include "model/match_bert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "../data/test_corpus.h"
#include "data/text/tokenizer.h"
#include "host_reads.h"
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

TEST(FlatBatch, ChunksAreConsecutiveWindowsEndedBySep) {
  const data::Document a = data::testing::SyntheticDocument(0);
  ASSERT_GT(a.num_tokens(), 13);
  // Windows of 8 - [CLS] - [SEP] = 6 tokens: at most 2 of them.
  const data::FlatBatch batch = data::BuildFlatBatch({&a}, data::FlatOptions{8, /*separator=*/true, /*chunks=*/2});
  ASSERT_EQ(batch.B, 2);
  ASSERT_EQ(batch.T, 8);
  for (int64_t row = 0; row < 2; ++row) {
    EXPECT_EQ(batch.tokens[row * 8], data::kClsId);
    for (int64_t t = 0; t < 6; ++t) EXPECT_EQ(batch.tokens[row * 8 + 1 + t], a.tokens[row * 6 + t]);
    EXPECT_EQ(batch.tokens[row * 8 + 7], data::kSepId);
    EXPECT_EQ(batch.row_document[row], 0);
  }
  // A 3-token document: one short row [CLS] t t t [SEP], padded.
  data::Document short_doc;
  short_doc.tokens = {40, 41, 42};
  short_doc.sentence_offsets = {0, 3};
  short_doc.paragraph_offsets = {0, 1};
  const data::FlatBatch both = data::BuildFlatBatch({&short_doc, &a}, data::FlatOptions{8, true, 3});
  EXPECT_EQ(both.B, 1 + std::min<int64_t>(3, (a.num_tokens() + 5) / 6));
  const std::vector<int32_t> first(both.tokens.begin(), both.tokens.begin() + 8);
  EXPECT_EQ(first, (std::vector<int32_t>{data::kClsId, 40, 41, 42, data::kSepId, 0, 0, 0}));
  // Real tokens: the short row's 5, then each window of `a` with its [CLS]/[SEP].
  const int64_t covered = std::min<int64_t>(a.num_tokens(), 3 * 6);
  EXPECT_EQ(both.real_tokens, 5 + covered + 2 * (both.B - 1));
}

// Rows through the encoder without a graph: passes of at most rows_per_pass
// rows of like length, each as wide as its longest row, and the rows back in
// their order. The encoder here returns, per row, its width in the pass, its
// token sum and its real-token count, so every property can be read off.
TEST(EncodeRowsWithoutGraph, PassesOfLikeLengthCutToTheirLongestRowInTheRowsOrder) {
  const std::vector<std::vector<int32_t>> given = {{5, 6}, {7, 8, 9, 10, 11}, {12}, {13, 14, 15}, {16, 17, 18, 19, 20},
                                                   {21, 22}, {23}};
  const int64_t rows = static_cast<int64_t>(given.size()), T = 6;  // one column of padding past the longest
  std::vector<int32_t> tokens(rows * T, data::kPadId);
  for (int64_t r = 0; r < rows; ++r) std::copy(given[r].begin(), given[r].end(), tokens.begin() + r * T);
  std::vector<std::vector<int64_t>> passes;  // each pass's (rows, width)
  const auto encode = [&](const torch::Tensor& ids) {
    passes.push_back({ids.size(0), ids.size(1)});
    const torch::Tensor real = ids.ne(data::kPadId);
    return torch::stack({torch::full({ids.size(0)}, ids.size(1), torch::kLong), ids.sum(1), real.sum(1)}, 1);
  };
  const torch::Tensor out = EncodeRowsWithoutGraph(tokens.data(), rows, T, torch::kCPU, 3, encode);
  ASSERT_EQ(out.size(0), rows);
  // Longest first, three a pass: lengths 5 5 3 | 2 2 1 | 1.
  EXPECT_EQ(passes, (std::vector<std::vector<int64_t>>{{3, 5}, {3, 2}, {1, 1}}));
  const std::vector<int64_t> width = {2, 5, 2, 5, 5, 2, 1};  // the width of the pass each row went in
  for (int64_t r = 0; r < rows; ++r) {
    int64_t sum = 0;
    for (int32_t id : given[r]) sum += id;
    EXPECT_EQ(out[r][0].item<int64_t>(), width[r]) << "row " << r;
    EXPECT_EQ(out[r][1].item<int64_t>(), sum) << "row " << r;
    EXPECT_EQ(out[r][2].item<int64_t>(), static_cast<int64_t>(given[r].size())) << "row " << r;
  }
  // A real encoder: the passes give each row the vector one full-width pass gives it.
  torch::manual_seed(0);
  FlatEncoder encoder(Tiny());
  encoder->eval();
  const torch::NoGradGuard no_grad;
  const torch::Tensor whole = encoder(torch::tensor(tokens, torch::kLong).view({rows, T}));
  const torch::Tensor passed = EncodeRowsWithoutGraph(tokens.data(), rows, T, torch::kCPU, 3,
                                                      [&](const torch::Tensor& ids) { return encoder(ids); });
  EXPECT_TRUE(torch::allclose(passed, whole, 1e-5, 1e-6)) << (passed - whole).abs().max().item<double>();
}

TEST(MatchBert, MeanPoolingAndChunkAveraging) {
  torch::manual_seed(0);
  MatchBertConfig c = Tiny();
  c.pooling = "mean";
  c.separator = true;
  c.max_tokens = 8;
  c.chunks = 3;
  FlatEncoder encoder(c);
  encoder->eval();
  torch::NoGradGuard no_grad;
  const data::Document a = data::testing::SyntheticDocument(2), b = data::testing::SyntheticDocument(3);
  const data::FlatBatch batch = data::BuildFlatBatch({&a, &b}, c.Flat());
  ASSERT_GT(batch.B, 2);  // windows to average
  const torch::Tensor documents = encoder->Documents(batch, torch::kCPU);
  // Second formulation, in float64 by hand: each window alone, the mean of
  // its real tokens' states, normalised; the document the normalised mean.
  const torch::Tensor states = encoder->Encode(ToTensor(batch, torch::kCPU)).to(torch::kDouble);
  std::vector<torch::Tensor> sums = {torch::zeros({c.hidden}, torch::kDouble),
                                     torch::zeros({c.hidden}, torch::kDouble)};  // two tensors, not one shared
  for (int64_t row = 0; row < batch.B; ++row) {
    torch::Tensor sum = torch::zeros({c.hidden}, torch::kDouble);
    int64_t real = 0;
    for (int64_t t = 0; t < batch.T; ++t) {
      if (batch.tokens[row * batch.T + t] == data::kPadId) continue;
      sum += states[row][t];
      ++real;
    }
    const torch::Tensor mean = sum / static_cast<double>(real);
    sums[batch.row_document[row]] += mean / mean.norm();
  }
  for (int d = 0; d < 2; ++d) {
    const torch::Tensor expected = sums[d] / sums[d].norm();
    EXPECT_TRUE(torch::allclose(documents[d].to(torch::kDouble), expected, 1e-5, 1e-6)) << d;
  }
  EXPECT_EQ(encoder->named_parameters().find("dense.weight"), nullptr);  // mean pooling has no dense head
}

// The windows of a document pooled, against loops in float64: max is the
// elementwise maximum of their unit vectors; attention weighs them by a
// softmax over the document's windows of context . tanh(W v + b), and with
// its context at zero (as it starts) equals the mean. Its parameters learn.
TEST(MatchBert, WindowPoolingsEqualFloat64HandComputations) {
  for (const std::string pooling : {"max", "attention"}) {
    torch::manual_seed(4);
    MatchBertConfig c = Tiny();
    c.pooling = "mean";
    c.separator = true;
    c.max_tokens = 8;
    c.chunks = 3;
    c.window_pooling = pooling;
    FlatEncoder encoder(c);
    encoder->to(torch::kFloat64);
    encoder->eval();
    const data::Document a = data::testing::SyntheticDocument(2), b = data::testing::SyntheticDocument(3);
    const data::FlatBatch batch = data::BuildFlatBatch({&a, &b}, c.Flat());
    ASSERT_GT(batch.B, 2);
    auto params = encoder->named_parameters();
    if (pooling == "attention") {
      // At the start: the mean of the windows.
      MatchBertConfig mean = c;
      mean.window_pooling = "mean";
      FlatEncoder averaged(mean);
      averaged->to(torch::kFloat64);
      averaged->eval();
      torch::NoGradGuard no_grad;
      for (const auto& p : averaged->named_parameters()) p.value().copy_(params[p.key()]);
      EXPECT_TRUE(torch::allclose(encoder->Documents(batch, torch::kCPU), averaged->Documents(batch, torch::kCPU),
                                  1e-12, 1e-12));
      params["window_context"].normal_(0.0, 1.0);  // as after training
    }
    const torch::Tensor rows = encoder->forward(ToTensor(batch, torch::kCPU)).detach();
    const torch::Tensor got = encoder->Documents(batch, torch::kCPU);
    for (int64_t d = 0; d < 2; ++d) {
      std::vector<int64_t> windows;
      for (int64_t row = 0; row < batch.B; ++row) {
        if (batch.row_document[row] == d) windows.push_back(row);
      }
      std::vector<double> pooled(c.hidden, pooling == "max" ? -1e300 : 0.0);
      if (pooling == "max") {
        for (int64_t row : windows) {
          for (int64_t k = 0; k < c.hidden; ++k) pooled[k] = std::max(pooled[k], rows[row][k].item<double>());
        }
      } else {
        const auto W = params["window_projection.weight"].accessor<double, 2>();
        const auto bias = params["window_projection.bias"].accessor<double, 1>();
        const auto context = params["window_context"].accessor<double, 1>();
        std::vector<double> weight;
        double total = 0;
        for (int64_t row : windows) {
          double score = 0;
          for (int64_t r = 0; r < c.hidden; ++r) {
            double projected = bias[r];
            for (int64_t k = 0; k < c.hidden; ++k) projected += W[r][k] * rows[row][k].item<double>();
            score += std::tanh(projected) * context[r];
          }
          weight.push_back(std::exp(score));
          total += weight.back();
        }
        for (size_t i = 0; i < windows.size(); ++i) {
          for (int64_t k = 0; k < c.hidden; ++k) pooled[k] += weight[i] / total * rows[windows[i]][k].item<double>();
        }
      }
      double norm = 0;
      for (double x : pooled) norm += x * x;
      for (int64_t k = 0; k < c.hidden; ++k) {
        EXPECT_NEAR(got[d][k].item<double>(), pooled[k] / std::sqrt(norm), 1e-12) << pooling << " document " << d;
      }
    }
    if (pooling == "attention") {
      got.sum().backward();
      EXPECT_GT(params["window_context"].grad().abs().sum().item<double>(), 0.0);
      EXPECT_GT(params["window_projection.weight"].grad().abs().sum().item<double>(), 0.0);
    }
  }
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

TEST(FlatPretraining, WordLmEqualsAHandFormulationInFloat64AndVectorsEqualTheEncoders) {
  torch::manual_seed(0);
  MatchBertConfig c = Tiny();
  c.pooling = "mean";
  c.chunks = 2;
  c.max_tokens = 10;
  FlatPretraining model(FlatEncoder(c), c);
  model->to(torch::kDouble);
  model->eval();
  std::vector<data::Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(data::testing::SyntheticDocument(i, 30));
  data::MaskOptions masks;
  masks.vocab_size = c.vocab_size;
  const data::FlatBatch batch = data::BuildFlatBatch({&docs[0], &docs[1], &docs[2]}, c.Flat(), masks, 0);
  const auto out = model->forward(batch, torch::kCPU);
  // Vectors: the encoder's document vectors of the same (masked) rows.
  EXPECT_TRUE(torch::allclose(out.vectors, model->encoder->Documents(batch, torch::kCPU), 1e-12, 1e-12));
  // LM: BERT's head by hand over every labelled position.
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : model->named_parameters()) p[item.key()] = item.value();
  const torch::Tensor states = model->encoder->Encode(ToTensor(batch, torch::kCPU));
  double total = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < batch.B; ++b) {
    for (int64_t t = 0; t < batch.T; ++t) {
      const int32_t label = batch.lm_labels[b * batch.T + t];
      if (label == data::kIgnoreLabel) continue;
      torch::Tensor h = torch::gelu(torch::matmul(p["lm_transform.weight"], states[b][t]) + p["lm_transform.bias"]);
      h = (h - h.mean()) / torch::sqrt(h.var(/*unbiased=*/false) + 1e-12) * p["lm_norm.weight"] + p["lm_norm.bias"];
      const torch::Tensor logits = torch::matmul(p["encoder.embeddings.tokens.weight"], h) + p["lm_bias"];
      total += (torch::logsumexp(logits, 0) - logits[label]).item<double>();
      ++count;
    }
  }
  ASSERT_GT(count, 3);
  ASSERT_EQ(out.lm_labels.size(0), count);
  EXPECT_NEAR(model->LanguageModelLoss(out.lm_hidden, out.lm_labels).item<double>(), total / count, 1e-10);
  // A batch without masks gives vectors and no LM outputs.
  const auto plain = model->forward(data::BuildFlatBatch({&docs[0]}, c.Flat()), torch::kCPU);
  EXPECT_FALSE(plain.lm_hidden.defined());
  EXPECT_EQ(plain.vectors.size(0), 1);
}

// The word LM's step (forward over masked rows and DocSplit's views, loss,
// backward) reads no value back to the host (host_reads.h): its predicted
// positions come from the host batch, not a boolean index of device labels.
TEST(FlatPretraining, WordLmStepReadsNoValueBackFromTheDevice) {
  torch::manual_seed(0);
  MatchBertConfig c = Tiny();
  c.max_tokens = 10;
  FlatPretraining model(FlatEncoder(c), c);
  std::vector<data::Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(data::testing::SyntheticDocument(i, 31));
  data::MaskOptions masks;
  masks.vocab_size = c.vocab_size;
  const data::FlatBatch batch = data::BuildFlatBatch({&docs[0], &docs[1], &docs[2]}, c.Flat(), masks, 0);
  testing::HostReads reads;
  const auto out = model->forward(batch, torch::kCPU);
  const auto views = model->ForwardViews(batch, torch::kCPU, /*language_model=*/true);
  (model->LanguageModelLoss(out.lm_hidden, out.lm_labels) + model->LanguageModelLoss(views.lm_hidden, views.lm_labels))
      .backward();
  EXPECT_EQ(reads.seen(), std::vector<std::string>{});
  EXPECT_GT(out.lm_labels.size(0), 0);
}

}  // namespace
}  // namespace docmatch::model
