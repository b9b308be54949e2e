// SMITH and the shared transformer pieces: fused vs plain attention, the
// packed (real tokens only) path against the padded one, shapes,
// gradients, padding invariance, losses against float64 hand computations,
// shared Siamese towers, and a tiny real batch that training drives down.
#include "model/smith.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>

#include "../data/test_corpus.h"
#include "data/batches/docsplit.h"
#include "data/text/tokenizer.h"
#include "host_reads.h"
#include "model/losses.h"
#include "real_text.h"

namespace docmatch::model {
namespace {

SmithConfig Tiny(const std::string& combine = "normal") {
  SmithConfig c;
  c.vocab_size = 1005;  // test_corpus.h's synthetic ids run to 1004
  c.hidden = 16;
  c.heads = 2;
  c.intermediate = 32;
  c.sentence_layers = 2;
  c.document_layers = 1;
  c.block_length = 8;
  c.max_blocks = 12;
  c.dropout = 0.0;
  c.combine = combine;
  return c;
}

std::vector<data::Document> Documents(int count, uint64_t seed = 7) {
  std::vector<data::Document> docs;
  for (int i = 0; i < count; ++i) docs.push_back(data::testing::SyntheticDocument(i, seed));
  return docs;
}

data::BlockBatch Batch(const std::vector<data::Document>& docs, const SmithConfig& c, bool masks) {
  std::vector<const data::Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  data::MaskOptions mask_options;
  mask_options.vocab_size = c.vocab_size;
  return data::BuildBlockBatch(pointers, {c.block_length, c.max_blocks}, masks ? &mask_options : nullptr, 0);
}

// The batch's masked block positions as a host tensor (B, K), -1 = none.
torch::Tensor MaskedBlocks(const data::BlockBatch& batch) {
  return torch::from_blob(const_cast<int64_t*>(batch.masked_blocks.data()), {batch.B, batch.K}, torch::kInt64).clone();
}

TEST(Attention, FusedKernelEqualsPlainFormulationWithAndWithoutPadding) {
  torch::manual_seed(1);
  MultiHeadAttention attention(16, 4, 0.0);
  attention->eval();
  const torch::Tensor x = torch::randn({3, 7, 16});
  torch::Tensor mask = torch::ones({3, 7}, torch::kBool);
  for (bool padded : {false, true}) {
    if (padded) {
      mask.index_put_({0, torch::indexing::Slice(4)}, false);
      mask.index_put_({2, torch::indexing::Slice(1)}, false);
    }
    attention->kernel = AttentionKernel::kFused;
    const torch::Tensor fused = attention(x, mask);
    attention->kernel = AttentionKernel::kPlain;
    const torch::Tensor plain = attention(x, mask);
    EXPECT_TRUE(torch::allclose(fused, plain, /*rtol=*/1e-5, /*atol=*/1e-6)) << "padded " << padded;
  }
  // And in float64, tightly.
  attention->to(torch::kFloat64);
  const torch::Tensor x64 = x.to(torch::kFloat64);
  attention->kernel = AttentionKernel::kFused;
  const torch::Tensor fused = attention(x64, mask);
  attention->kernel = AttentionKernel::kPlain;
  EXPECT_TRUE(torch::allclose(fused, attention(x64, mask), 1e-12, 1e-12));
}

// A key mask of 5 sequences of 7 positions, real lengths 5, 5 (with holes),
// 1, 7 and 2, counted by hand.
torch::Tensor FiveSequencesOfSeven() {
  return torch::tensor({1, 1, 1, 1, 1, 0, 0,  //
                        1, 1, 0, 1, 1, 0, 1,  //
                        1, 0, 0, 0, 0, 0, 0,  //
                        1, 1, 1, 1, 1, 1, 1,  //
                        1, 1, 0, 0, 0, 0, 0},
                       torch::kBool)
      .view({5, 7});
}

TEST(Transformer, PackedLayoutCutsRowsBySequenceAndGroupsThemByLength) {
  const torch::Tensor mask = FiveSequencesOfSeven();  // lengths 5, 5 (with holes), 1, 7, 2
  const PackedLayout layout = PackedLayout::FromIndex(mask.reshape({-1}).nonzero().squeeze(1), 5, 7);
  EXPECT_TRUE(torch::equal(layout.cumulative, torch::tensor({0, 5, 10, 11, 18, 20}, torch::kInt32)));
  // Shortest first, ties in sequence order: row 10 (length 1), 18-19 (2),
  // 0-4 and 5-9 (5), 11-17 (7).
  const std::vector<int64_t> expected = {10, 18, 19, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17};
  EXPECT_TRUE(torch::equal(layout.by_length, torch::tensor(expected)));
  EXPECT_TRUE(torch::equal(layout.by_length.index_select(0, layout.from_length), torch::arange(20)));
  const std::vector<std::pair<int64_t, int64_t>> runs = {{1, 1}, {2, 1}, {5, 2}, {7, 1}};
  EXPECT_EQ(layout.runs, runs);
}

TEST(Transformer, PackedPathEqualsPaddedPathAtRealTokensWithGradients) {
  // The packed path (real tokens only), attending without padding and in
  // the padded grid, against the padded forward in float64: outputs at real
  // tokens and every parameter's gradient, with the fused and the plain
  // kernel. Row 1 has holes inside it, row 2 a single real token, rows 0 and
  // 1 one length, so nothing relies on suffix padding or one row a length.
  torch::manual_seed(3);
  TransformerConfig config{/*hidden=*/16, /*heads=*/2, /*intermediate=*/32, /*layers=*/2, /*dropout=*/0.0};
  TransformerEncoder encoder(config);
  InitializeBertStyle(*encoder);
  encoder->to(torch::kFloat64);
  const torch::Tensor x = torch::randn({5, 7, 16}, torch::kFloat64);
  const torch::Tensor mask = FiveSequencesOfSeven();
  const torch::Tensor weights = torch::randn({5, 7, 16}, torch::kFloat64);  // a loss that reads every real output

  auto gradients = [&] {
    std::vector<torch::Tensor> grads;
    for (auto& p : encoder->parameters()) {
      grads.push_back(p.grad().clone());
      p.mutable_grad().zero_();
    }
    return grads;
  };
  const torch::Tensor padded = encoder(x, mask);  // (5, 7, 16)
  (padded * weights * mask.unsqueeze(-1)).sum().backward();
  const std::vector<torch::Tensor> padded_grads = gradients();

  const PackedLayout layout = PackedLayout::FromIndex(mask.reshape({-1}).nonzero().squeeze(1), 5, 7);
  ASSERT_TRUE(torch::equal(layout.key_mask, mask));
  ASSERT_EQ(layout.index.size(0), mask.sum().item<int64_t>());
  for (const AttentionKernel kernel : {AttentionKernel::kFused, AttentionKernel::kPlain}) {
    encoder->set_kernel(kernel);
    for (const bool grid : {false, true}) {
      UsePackedAttention(*encoder, grid ? PackedAttention::kPadded : PackedAttention::kUnpadded);
      const torch::Tensor packed = encoder->ForwardPacked(x.reshape({35, 16}).index_select(0, layout.index), layout);
      (packed * weights.reshape({35, 16}).index_select(0, layout.index)).sum().backward();
      const std::vector<torch::Tensor> packed_grads = gradients();

      const std::string where = std::string(grid ? "padded grid" : "unpadded") +
                                (kernel == AttentionKernel::kFused ? ", fused kernel" : ", plain kernel");
      const torch::Tensor unpacked = layout.Unpack(packed);  // (5, 7, 16), zeros at padding
      EXPECT_TRUE(torch::allclose(unpacked, padded * mask.unsqueeze(-1), 1e-12, 1e-12)) << where;
      EXPECT_EQ(unpacked.masked_select(mask.logical_not().unsqueeze(-1)).abs().sum().item<double>(), 0.0) << where;
      ASSERT_EQ(padded_grads.size(), packed_grads.size());
      for (size_t i = 0; i < padded_grads.size(); ++i) {
        EXPECT_GT(padded_grads[i].abs().sum().item<double>(), 0.0) << "parameter " << i;
        EXPECT_TRUE(torch::allclose(packed_grads[i], padded_grads[i], 1e-10, 1e-12)) << "parameter " << i << ", " << where;
      }
    }
  }
}

TEST(Smith, OutputShapesAndUnitVectors) {
  torch::manual_seed(0);
  const SmithConfig c = Tiny();
  SmithPretraining model(SmithEncoder(c), c);
  const auto docs = Documents(5);
  const data::BlockBatch batch = Batch(docs, c, /*masks=*/true);
  const BlockTensors t = ToTensors(batch, torch::kCPU);
  const torch::Tensor vectors = model->encoder(t);
  EXPECT_EQ(vectors.sizes(), (std::vector<int64_t>{5, 16}));
  EXPECT_TRUE(torch::allclose(vectors.norm(2, 1), torch::ones({5}), 1e-5, 1e-5));
  const auto out = model->forward(t, /*sentence_blocks=*/true);
  const int64_t predicted = t.lm_labels.ne(data::kIgnoreLabel).sum().item<int64_t>();
  EXPECT_EQ(out.lm_hidden.sizes(), (std::vector<int64_t>{predicted, 16}));
  EXPECT_EQ(model->LanguageModelLogits(out.lm_hidden).sizes(), (std::vector<int64_t>{predicted, c.vocab_size}));
  const int64_t masked = MaskedBlocks(batch).ge(0).sum().item<int64_t>();
  EXPECT_EQ(out.block_predictions.sizes(), (std::vector<int64_t>{masked, 16}));
  EXPECT_EQ(out.block_originals.sizes(), (std::vector<int64_t>{masked, 16}));
}

TEST(Smith, EveryParameterReceivesAGradientInEveryCombineMode) {
  for (const std::string combine : {"normal", "sum_concat", "mean_concat", "attention", "residual", "mean"}) {
    torch::manual_seed(0);
    SmithConfig c = Tiny(combine == "mean" ? "residual" : combine);
    if (combine == "mean") c.block_pooling = "mean";  // no block_dense then
    SmithPretraining model(SmithEncoder(c), c);
    const auto docs = Documents(6);
    const BlockTensors t = ToTensors(Batch(docs, c, true), torch::kCPU);
    const BlockTensors a = ToTensors(Batch({docs[0], docs[1], docs[2]}, c, false), torch::kCPU);
    const BlockTensors b = ToTensors(Batch({docs[3], docs[4], docs[5]}, c, false), torch::kCPU);
    const auto [pretrain, lm, block] = model->Loss(t, true);
    const torch::Tensor loss = pretrain + SiameseLoss(model->encoder, a, b, torch::tensor({1.0, 0.0, 1.0}));
    loss.backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << combine << ": " << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << combine << ": " << p.key();
    }
  }
}

// §4.1.4 by hand, in float64 and loops: the document-level vector is the
// normalised dense projection of the document transformer's first output;
// the concat modes pool the block vectors h_i (not the document
// transformer's outputs) over the real blocks, put the pool in front and
// scale the whole to unit length.
TEST(Smith, CombineModesEqualAFloat64HandComputation) {
  for (const std::string combine : {"normal", "sum_concat", "mean_concat", "attention", "residual"}) {
    torch::manual_seed(3);
    const SmithConfig c = Tiny(combine);
    SmithEncoder encoder(c);
    encoder->to(torch::kFloat64);
    encoder->eval();
    if (combine == "residual") {  // as after some training: its dense layer starts at zero
      torch::NoGradGuard no_grad;
      encoder->named_parameters()["document_dense.weight"].normal_(0.0, 0.3);
      encoder->named_parameters()["document_dense.bias"].normal_(0.0, 0.3);
    }
    const BlockTensors t = ToTensors(Batch(Documents(3), c, false), torch::kCPU);
    const auto blocks = encoder->EncodeBlocks(t.tokens, t.layout);
    const torch::Tensor states = encoder->EncodeDocument(blocks.vectors, t.block_mask);
    const torch::Tensor got = encoder->Combine(blocks.vectors, states, t.block_mask);
    ASSERT_EQ(got.size(1), combine == "normal" || combine == "residual" ? c.hidden : 2 * c.hidden) << combine;
    EXPECT_TRUE(torch::equal(got, encoder(t))) << combine;
    auto params = encoder->named_parameters();
    const auto W = params["document_dense.weight"].accessor<double, 2>();
    const auto b = params["document_dense.bias"].accessor<double, 1>();
    const auto h = blocks.vectors.accessor<double, 3>();
    const auto first = states.accessor<double, 3>();
    const auto mask = t.block_mask.accessor<bool, 2>();
    const int64_t C = c.hidden, S = t.block_mask.size(1);
    auto unit = [](std::vector<double> v) {
      double norm = 0;
      for (double x : v) norm += x * x;
      for (double& x : v) x /= std::sqrt(norm);
      return v;
    };
    for (int64_t i = 0; i < got.size(0); ++i) {
      std::vector<double> document(C);
      for (int64_t r = 0; r < C; ++r) {
        document[r] = b[r];
        for (int64_t k = 0; k < C; ++k) document[r] += W[r][k] * first[i][0][k];
      }
      document = unit(document);
      std::vector<double> expected = document;
      if (combine == "residual") {
        // unit(mean of the real h_j + W mean of the real states_j + b)
        int64_t real = 0;
        std::vector<double> h_mean(C, 0.0), state_mean(C, 0.0);
        for (int64_t j = 0; j < S; ++j) {
          if (!mask[i][j]) continue;
          ++real;
          for (int64_t k = 0; k < C; ++k) h_mean[k] += h[i][j][k], state_mean[k] += first[i][j][k];
        }
        for (int64_t r = 0; r < C; ++r) {
          expected[r] = h_mean[r] / real + b[r];
          for (int64_t k = 0; k < C; ++k) expected[r] += W[r][k] * state_mean[k] / real;
        }
        expected = unit(expected);
      } else if (combine != "normal") {
        std::vector<double> weight(S, 0.0);
        int64_t real = 0;
        for (int64_t j = 0; j < S; ++j) real += mask[i][j];
        if (combine == "attention") {
          const auto P = params["attention_projection.weight"].accessor<double, 2>();
          const auto p = params["attention_projection.bias"].accessor<double, 1>();
          const auto context = params["attention_context"].accessor<double, 1>();
          double largest = -1e300, total = 0;
          for (int64_t j = 0; j < S; ++j) {
            if (!mask[i][j]) continue;
            for (int64_t r = 0; r < C; ++r) {
              double projected = p[r];
              for (int64_t k = 0; k < C; ++k) projected += P[r][k] * h[i][j][k];
              weight[j] += std::tanh(projected) * context[r];
            }
            largest = std::max(largest, weight[j]);
          }
          for (int64_t j = 0; j < S; ++j) total += mask[i][j] ? std::exp(weight[j] - largest) : 0.0;
          for (int64_t j = 0; j < S; ++j) weight[j] = mask[i][j] ? std::exp(weight[j] - largest) / total : 0.0;
        } else {
          for (int64_t j = 0; j < S; ++j) weight[j] = mask[i][j] ? (combine == "sum_concat" ? 1.0 : 1.0 / real) : 0.0;
        }
        std::vector<double> pooled(C, 0.0);
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t k = 0; k < C; ++k) pooled[k] += weight[j] * h[i][j][k];
        }
        pooled.insert(pooled.end(), document.begin(), document.end());
        expected = unit(pooled);
      }
      for (int64_t k = 0; k < got.size(1); ++k) {
        EXPECT_NEAR(got[i][k].item<double>(), expected[k], 1e-12) << combine << " document " << i << " dim " << k;
      }
    }
  }
}

// import-hf's start for a mean-pooled sentence encoder: block_pooling mean
// makes a block vector the unit mean of the block's token states (the
// checkpoint's own sentence vector, [CLS] and [SEP] counted as
// sentence-transformers counts them), and combine residual starts with the
// document vector equal to the unit mean of the block vectors: the windows
// averaged, whatever the fresh document layers hold. One optimizer step
// later the document layers take part.
TEST(Smith, ResidualMeanPoolingStartsAsTheBlockVectorsAveraged) {
  torch::manual_seed(5);
  SmithConfig c = Tiny("residual");
  c.block_pooling = "mean";
  SmithEncoder encoder(c);
  EXPECT_EQ(encoder->named_parameters().find("block_dense.weight"), nullptr);
  encoder->to(torch::kFloat64);
  encoder->eval();
  const BlockTensors t = ToTensors(Batch(Documents(3), c, false), torch::kCPU);
  const auto blocks = encoder->EncodeBlocks(t.tokens, t.layout);
  const int64_t C = c.hidden, S = t.block_mask.size(1), T = t.tokens.size(2);
  // The block vectors, by loops over the packed token rows.
  const auto index = blocks.tokens.index.accessor<int64_t, 1>();
  const auto real = blocks.real.accessor<int64_t, 1>();
  const auto states = blocks.token_states.accessor<double, 2>();
  std::vector<std::vector<double>> sums(blocks.real.size(0), std::vector<double>(C, 0.0));
  std::vector<int64_t> counts(blocks.real.size(0), 0);
  for (int64_t n = 0; n < blocks.tokens.index.size(0); ++n) {
    const int64_t r = index[n] / T;
    ++counts[r];
    for (int64_t k = 0; k < C; ++k) sums[r][k] += states[n][k];
  }
  const auto h = blocks.vectors.accessor<double, 3>();
  for (int64_t r = 0; r < blocks.real.size(0); ++r) {
    double norm = 0;
    for (double x : sums[r]) norm += x * x;
    norm = std::sqrt(norm);
    for (int64_t k = 0; k < C; ++k) {
      EXPECT_NEAR(h[real[r] / S][real[r] % S][k], sums[r][k] / norm, 1e-12) << "block " << r << " dim " << k;
    }
  }
  EXPECT_EQ(counts[0], t.tokens[0][0].ne(data::kPadId).sum().item<int64_t>());
  // The document vector at step 0: the block vectors' unit mean.
  const torch::Tensor got = encoder(t);
  const auto mask = t.block_mask.accessor<bool, 2>();
  for (int64_t i = 0; i < got.size(0); ++i) {
    std::vector<double> mean(C, 0.0);
    double norm = 0;
    for (int64_t j = 0; j < S; ++j) {
      for (int64_t k = 0; k < C; ++k) mean[k] += mask[i][j] ? h[i][j][k] : 0.0;
    }
    for (double x : mean) norm += x * x;
    for (int64_t k = 0; k < C; ++k) {
      EXPECT_NEAR(got[i][k].item<double>(), mean[k] / std::sqrt(norm), 1e-12) << "document " << i;
    }
  }
  // A step of a pair loss moves the document layers' dense layer off zero,
  // and the vectors off the mean.
  encoder->train();
  torch::optim::SGD sgd(encoder->parameters(), 0.5);
  const BlockTensors a = ToTensors(Batch({Documents(4)[0], Documents(4)[1]}, c, false), torch::kCPU);
  const BlockTensors b = ToTensors(Batch({Documents(4)[2], Documents(4)[3]}, c, false), torch::kCPU);
  SiameseLoss(encoder, a, b, torch::tensor({1.0, 0.0}, torch::kFloat64)).backward();
  sgd.step();
  encoder->eval();
  EXPECT_GT(encoder->named_parameters()["document_dense.weight"].abs().sum().item<double>(), 0.0);
  const auto after = encoder->EncodeBlocks(t.tokens, t.layout);
  const torch::Tensor averaged =
      torch::nn::functional::normalize((after.vectors * t.block_mask.unsqueeze(-1).to(torch::kFloat64)).sum(1),
                                       torch::nn::functional::NormalizeFuncOptions().dim(-1));
  EXPECT_GT((encoder(t) - averaged).abs().max().item<double>(), 1e-6);
}

// finetune --sentence-lr-scale / --freeze-sentence-steps: the lower level is
// the token embeddings and the sentence transformer, under any prefix.
TEST(Smith, TheSentenceLevelIsTheEmbeddingsAndTheSentenceTransformer) {
  const SmithConfig c = Tiny();
  SmithPretraining model(SmithEncoder(c), c);
  int64_t lower = 0, upper = 0;
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    const bool expected = name.rfind("encoder.embeddings.", 0) == 0 || name.rfind("encoder.sentence_encoder.", 0) == 0;
    EXPECT_EQ(SmithSentenceLevel(name), expected) << name;
    (expected ? lower : upper) += 1;
  }
  EXPECT_GT(lower, 4);
  EXPECT_GT(upper, 4);  // document_encoder, document_embedding_norm, block_positions, heads ...
  EXPECT_FALSE(SmithSentenceLevel("document_embedding_norm.weight"));
}

TEST(Smith, PaddingBlocksTokensAndBatchMatesDoNotChangeOutputs) {
  for (const std::string combine : {"normal", "sum_concat", "mean_concat", "attention"}) {
    torch::manual_seed(0);
    const SmithConfig c = Tiny(combine);
    SmithEncoder encoder(c);
    encoder->eval();
    const auto docs = Documents(4);
    const BlockTensors t = ToTensors(Batch(docs, c, false), torch::kCPU);
    const torch::Tensor reference = encoder(t);
    // Two more padded blocks and enough padded tokens to reach block_length.
    const data::BlockBatch batch = Batch(docs, c, false);
    const BlockTensors padded =
        ToTensors(data::PadGrid(batch, std::min<int64_t>(batch.S + 2, c.max_blocks), c.block_length), torch::kCPU);
    ASSERT_GT(padded.tokens.numel(), t.tokens.numel());
    EXPECT_TRUE(torch::allclose(encoder(padded), reference, 1e-5, 1e-6)) << combine;
    // A document alone gives what it gives inside the batch.
    const BlockTensors alone = ToTensors(Batch({docs[2]}, c, false), torch::kCPU);
    EXPECT_TRUE(torch::allclose(encoder(alone)[0], reference[2], 1e-5, 1e-6)) << combine;
  }
}

TEST(Losses, EqualFloat64HandComputations) {
  // Sentence-block loss: 3 predictions against 4 candidates.
  const std::vector<std::vector<double>> pred = {{0.3, -1.2}, {2.0, 0.5}, {-0.7, 0.9}};
  const std::vector<std::vector<double>> cand = {{1.0, 0.0}, {0.0, 1.0}, {0.6, 0.8}, {-0.8, 0.6}};
  const std::vector<int64_t> positive = {0, 2, 3};
  double expected = 0;
  for (size_t m = 0; m < pred.size(); ++m) {
    double sum = 0, target = 0;
    for (size_t n = 0; n < cand.size(); ++n) {
      const double s = pred[m][0] * cand[n][0] + pred[m][1] * cand[n][1];
      sum += std::exp(s);
      if (static_cast<int64_t>(n) == positive[m]) target = s;
    }
    expected += (std::log(sum) - target) / pred.size();
  }
  auto tensor = [](const std::vector<std::vector<double>>& v) {
    torch::Tensor t = torch::empty({static_cast<int64_t>(v.size()), 2});
    for (size_t i = 0; i < v.size(); ++i) t[i] = torch::tensor({v[i][0], v[i][1]});
    return t;
  };
  torch::Tensor scores;
  EXPECT_NEAR(SentenceBlockLoss(tensor(pred), tensor(cand), torch::tensor(positive), false, &scores).item<double>(),
              expected, 1e-6);
  // The scores handed back for metrics are the dot products above.
  ASSERT_EQ(scores.sizes(),
            (std::vector<int64_t>{static_cast<int64_t>(pred.size()), static_cast<int64_t>(cand.size())}));
  for (size_t m = 0; m < pred.size(); ++m) {
    for (size_t n = 0; n < cand.size(); ++n) {
      EXPECT_NEAR(scores[m][n].item<double>(), pred[m][0] * cand[n][0] + pred[m][1] * cand[n][1], 1e-6);
    }
  }

  // Siamese: amplifier * cosine through a sigmoid cross-entropy.
  const std::vector<double> a0 = {1, 2, 2}, b0 = {2, 1, 2}, a1 = {1, 0, 0}, b1 = {-1, 1, 0};
  auto cosine = [](const std::vector<double>& x, const std::vector<double>& y) {
    double dot = 0, nx = 0, ny = 0;
    for (int i = 0; i < 3; ++i) dot += x[i] * y[i], nx += x[i] * x[i], ny += y[i] * y[i];
    return dot / std::sqrt(nx * ny);
  };
  auto bce = [](double logit, double label) {
    const double p = 1 / (1 + std::exp(-logit));
    return -(label * std::log(p) + (1 - label) * std::log(1 - p));
  };
  const double siamese = (bce(6 * cosine(a0, b0), 1) + bce(6 * cosine(a1, b1), 0)) / 2;
  const torch::Tensor A = torch::tensor({1.0, 2.0, 2.0, 1.0, 0.0, 0.0}).view({2, 3});
  const torch::Tensor B = torch::tensor({2.0, 1.0, 2.0, -1.0, 1.0, 0.0}).view({2, 3});
  EXPECT_NEAR(SiameseCosineLoss(A, B, torch::tensor({1.0, 0.0}), 6.0).item<double>(), siamese, 1e-6);

  // Masked LM: plain softmax cross-entropy.
  const torch::Tensor logits = torch::tensor({0.5, -1.0, 2.0, 0.0, 1.5, 0.2}).view({2, 3});
  const double lm = ((std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0)) - 2.0) +
                     (std::log(std::exp(0.0) + std::exp(1.5) + std::exp(0.2)) - 0.0)) /
                    2;
  EXPECT_NEAR(MaskedLmLoss(logits, torch::tensor({2L, 0L})).item<double>(), lm, 1e-6);
}

// A step bucket's filler rows (ignored) keep every candidate, so that a rank
// whose masked blocks are all fillers, where `real` leaves no candidate of
// its own, still has finite gradients; a counted row sees the real ones only,
// as if the others were not there.
TEST(Losses, SentenceBlockLossLeavesOutUnrealCandidatesOfCountedRowsOnly) {
  torch::manual_seed(3);
  const torch::Tensor predictions = torch::randn({3, 4}, torch::kFloat64).requires_grad_();
  const torch::Tensor candidates = torch::randn({4, 4}, torch::kFloat64).requires_grad_();
  // Nothing real, every row ignored: zero loss and zero, finite gradients.
  const torch::Tensor none = SentenceBlockLoss(predictions, candidates, torch::full({3}, int64_t{-100}), /*sum=*/true,
                                               nullptr, torch::zeros({4}, torch::kBool));
  none.backward();
  EXPECT_EQ(none.item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(predictions.grad(), torch::zeros_like(predictions)));
  EXPECT_TRUE(torch::equal(candidates.grad(), torch::zeros_like(candidates)));
  // Row 1 counted against the real candidates 0 and 2: the loss of those two alone.
  const torch::Tensor real = torch::tensor({true, false, true, false});
  const torch::Tensor loss = SentenceBlockLoss(predictions, candidates, torch::tensor({int64_t{-100}, int64_t{2}, int64_t{-100}}),
                                               /*sum=*/true, nullptr, real);
  const torch::Tensor logits = predictions[1].matmul(torch::stack({candidates[0], candidates[2]}).t());
  const torch::Tensor alone = -torch::log_softmax(logits, 0)[1];
  EXPECT_NEAR(loss.item<double>(), alone.item<double>(), 1e-12);
  const auto grads = torch::autograd::grad({loss}, {predictions, candidates});
  const auto expected = torch::autograd::grad({alone}, {predictions, candidates});
  EXPECT_TRUE(torch::allclose(grads[0], expected[0], 1e-12, 1e-14));
  EXPECT_TRUE(torch::allclose(grads[1], expected[1], 1e-12, 1e-14));
}

TEST(Losses, DecoderCrossEntropyEqualsCrossEntropyOfTheLogitsWithGradients) {
  // The fused LM loss against cross_entropy(hidden W^T + b) in float64: value
  // and the gradients of hidden, decoder and bias, averaged and summed, with
  // an upstream factor of 3 so that the scale must reach every gradient.
  torch::manual_seed(5);
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).requires_grad(true);
  const torch::Tensor hidden = torch::randn({9, 6}, options), decoder = torch::randn({13, 6}, options);
  const torch::Tensor bias = torch::randn({13}, options);
  const torch::Tensor labels = torch::tensor({0L, 12L, 5L, 5L, 7L, 1L, 12L, 3L, 9L});
  for (bool sum : {false, true}) {
    auto run = [&](const torch::Tensor& loss) {
      (3 * loss).backward();
      std::vector<torch::Tensor> out = {loss.detach()};
      for (const auto* t : {&hidden, &decoder, &bias}) {
        out.push_back(t->grad().clone());
        const_cast<torch::Tensor&>(*t).mutable_grad().zero_();
      }
      return out;
    };
    const auto fused = run(DecoderCrossEntropy(hidden, decoder, bias, labels, sum));
    const auto reference = run(MaskedLmLoss(torch::addmm(bias, hidden, decoder.t()), labels, sum));
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_TRUE(torch::allclose(fused[i], reference[i], 1e-12, 1e-12)) << "sum " << sum << " output " << i;
    }
    EXPECT_GT(fused[2].abs().sum().item<double>(), 0.0);
  }
}

TEST(Smith, PretrainingLossEqualsASecondFormulationInFloat64) {
  torch::manual_seed(3);
  const SmithConfig c = Tiny();
  SmithPretraining model(SmithEncoder(c), c);
  model->eval();
  const auto docs = Documents(4, 11);
  const BlockTensors t = ToTensors(Batch(docs, c, true), torch::kCPU);
  const auto [total, lm, block] = model->Loss(t, true);
  const auto out = model->forward(t, true);
  // Block loss by loops over the masked blocks, in float64.
  const auto p = out.block_predictions.to(torch::kFloat64), o = out.block_originals.to(torch::kFloat64);
  double expected = 0;
  for (int64_t m = 0; m < p.size(0); ++m) {
    double sum = 0;
    for (int64_t n = 0; n < o.size(0); ++n) sum += std::exp(torch::dot(p[m], o[n]).item<double>());
    expected += (std::log(sum) - torch::dot(p[m], o[m]).item<double>()) / p.size(0);
  }
  EXPECT_NEAR(block.item<double>(), expected, 1e-4);
  // LM loss by loops too.
  const auto logits = model->LanguageModelLogits(out.lm_hidden).to(torch::kFloat64);
  double lm_expected = 0;
  for (int64_t m = 0; m < logits.size(0); ++m) {
    lm_expected +=
        (torch::logsumexp(logits[m], 0).item<double>() - logits[m][out.lm_labels[m].item<int64_t>()].item<double>()) /
        logits.size(0);
  }
  EXPECT_NEAR(lm.item<double>(), lm_expected, 1e-4);
  EXPECT_NEAR(total.item<double>(), lm.item<double>() + block.item<double>(), 1e-6);
}

// A batch padded to its step bucket (data::BucketFor, with fillers in every
// count: blocks, tokens, predicted words and masked blocks) gives the
// unpadded batch's losses, document vectors and every parameter's gradient,
// in float64: WP+SP and WP, with [CLS] and mean block pooling, and
// DocSplit's views with the word LM.
TEST(Smith, BatchPaddedToItsStepBucketGivesTheUnpaddedLossesAndGradients) {
  const data::StepBuckets buckets{/*granularity=*/8, /*ratio=*/1.5};
  const auto results = [](SmithPretraining& model, const std::vector<torch::Tensor>& outputs) {
    std::vector<torch::Tensor> all;
    for (const auto& o : outputs) all.push_back(o.detach().clone());
    for (auto& p : model->parameters()) {
      all.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    return all;
  };
  const auto expect_equal = [](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                               const std::string& where) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-10, 1e-12)) << where << ", output or gradient " << i;
    }
  };
  for (const std::string pooling : {"cls", "mean"}) {
    SmithConfig c = Tiny("residual");
    c.block_pooling = pooling;
    torch::manual_seed(0);
    SmithPretraining model(SmithEncoder(c), c);
    model->to(torch::kFloat64);
    // The grid's last block, which the fillers' gathers read, is real and
    // masked: the last document has the most blocks, the grid is cut to
    // them, and it masks its last block.
    std::vector<data::Document> docs = Documents(4, 3);
    const auto blocks_of = [&](const data::Document& d) {  // as Batch() packs them
      return data::PackBlocks(d, {c.block_length, c.max_blocks}).size();
    };
    std::stable_sort(docs.begin(), docs.end(),
                     [&](const data::Document& a, const data::Document& b) { return blocks_of(a) < blocks_of(b); });
    c.max_blocks = static_cast<int64_t>(blocks_of(docs.back()));
    data::BlockBatch batch = Batch(docs, c, /*masks=*/true);
    ASSERT_EQ(batch.S, c.max_blocks);
    ASSERT_TRUE(batch.block_mask.back());
    batch.masked_blocks[(batch.B - 1) * batch.K] = batch.S - 1;
    batch.masked_blocks[(batch.B - 1) * batch.K + 1] = 0;
    batch.masked_blocks[1] = -1;  // one document masks one block: a masked-block filler too
    const data::StepCounts counts = data::CountStep(batch);
    const data::StepShape shape = data::BucketFor(counts, batch.B, batch.K, c.Blocks(), buckets);
    ASSERT_GT(shape.R, counts.R);
    ASSERT_GT(shape.N - counts.N, shape.R - counts.R);  // some filler block holds more than one token
    ASSERT_GT(shape.M, counts.M);
    ASSERT_GT(shape.P, counts.P);
    const BlockTensors plain = ToTensors(batch, torch::kCPU);
    const BlockTensors bucketed = ToTensors(batch, torch::kCPU, &shape);
    EXPECT_EQ(bucketed.tokens.sizes(), (std::vector<int64_t>{batch.B, shape.S, shape.T}));
    EXPECT_EQ(bucketed.layout.real.size(0), shape.R);
    EXPECT_EQ(bucketed.layout.tokens.size(0), shape.N);
    EXPECT_EQ(bucketed.layout.predicted.size(0), shape.M);
    EXPECT_EQ(bucketed.layout.masked.size(0), shape.P);
    EXPECT_TRUE(torch::equal(bucketed.layout.counts, torch::tensor({counts.R, counts.N, counts.M, counts.P})));
    for (const bool sentence_blocks : {true, false}) {
      std::vector<std::vector<torch::Tensor>> runs;
      for (const BlockTensors* t : {&plain, &bucketed}) {
        const auto [total, lm, block] = model->Loss(*t, sentence_blocks);
        total.backward();
        runs.push_back(results(model, {total, lm, block, model->encoder(*t)}));
      }
      expect_equal(runs[0], runs[1], pooling + (sentence_blocks ? ", wp+sp" : ", wp"));
    }
    // DocSplit: the views of the documents, the word LM weighted in.
    const std::vector<data::Document> split = Documents(4, 9);
    std::vector<const data::Document*> pointers;
    for (const auto& d : split) pointers.push_back(&d);
    data::MaskOptions masks;
    masks.vocab_size = c.vocab_size;
    masks.masked_blocks = 0;
    const data::BlockBatch views = data::BuildDocSplitBatch(pointers, c.Blocks(), &masks, 5, 0);
    const data::StepShape view_shape =
        data::BucketFor(data::CountStep(views), views.B, views.K, c.Blocks(), buckets);
    std::vector<std::vector<torch::Tensor>> runs;
    for (const data::StepShape* s : {static_cast<const data::StepShape*>(nullptr), &view_shape}) {
      const auto [total, contrastive, lm] = model->DocSplit(ToTensors(views, torch::kCPU, s), 0.05, 0.1);
      total.backward();
      runs.push_back(results(model, {total, contrastive, lm}));
    }
    expect_equal(runs[0], runs[1], pooling + ", docsplit");
  }
}

// The layout that packs a step, made on the host from the batch's arrays,
// against a second formulation on its tensors: the masks' nonzero(), as the
// device would compute it.
TEST(Smith, BlockLayoutMadeOnTheHostEqualsTheMasksNonzero) {
  const SmithConfig c = Tiny();
  data::BlockBatch batch = data::PadGrid(Batch(Documents(6, 5), c, /*masks=*/true), c.max_blocks, c.block_length);
  // A real block that starts with padding keeps its position 0, so that it
  // has a row to pool.
  const int64_t odd = 1 * batch.S + 1;
  ASSERT_TRUE(batch.block_mask[odd]);
  batch.tokens[odd * batch.T] = data::kPadId;
  batch.lm_labels[odd * batch.T] = data::kIgnoreLabel;
  const BlockTensors t = ToTensors(batch, torch::kCPU);
  const int64_t B = batch.B, S = batch.S, T = batch.T;

  const torch::Tensor real = t.block_mask.reshape({-1}).nonzero().squeeze(1);
  torch::Tensor key_mask = t.tokens.reshape({B * S, T}).index_select(0, real).ne(data::kPadId);
  key_mask.select(1, 0).fill_(true);
  const torch::Tensor tokens = key_mask.reshape({-1}).nonzero().squeeze(1);
  const torch::Tensor labels =
      t.lm_labels.reshape({B * S, T}).index_select(0, real).reshape({-1}).index_select(0, tokens);
  const torch::Tensor predicted = labels.ne(data::kIgnoreLabel).nonzero().squeeze(1);
  const torch::Tensor masked_blocks = MaskedBlocks(batch);
  const torch::Tensor chosen = masked_blocks.ge(0);
  const torch::Tensor rows = torch::arange(B).unsqueeze(1).expand_as(chosen);
  const torch::Tensor masked = (rows * S + masked_blocks).index({chosen});

  ASSERT_GT(predicted.size(0), 0);
  ASSERT_GT(masked.size(0), 0);
  ASSERT_LT(real.size(0), B * S);
  EXPECT_TRUE(torch::equal(t.layout.real, real));
  EXPECT_TRUE(torch::equal(t.layout.tokens, tokens));
  EXPECT_TRUE(torch::equal(t.layout.predicted, predicted));
  EXPECT_TRUE(torch::equal(t.layout.masked, masked));
  EXPECT_EQ(t.layout.tokens.scalar_type(), torch::kLong);
  // The padded [CLS] of the odd block is packed; a padded token elsewhere is not.
  const int64_t r = t.block_mask.reshape({-1}).slice(0, 0, odd).sum().item<int64_t>();
  EXPECT_TRUE(t.layout.tokens.eq(r * T).any().item<bool>());
}

// A SMITH pre-training step (WP, WP+SP, DocSplit), forward and backward,
// and the document vectors read no tensor value back to the host
// (host_reads.h): on a GPU the step runs with no host sync from packing, the
// masked words or the masked blocks. Every layout index comes from the
// batch's host arrays.
TEST(Smith, PretrainingStepReadsNoValueBackFromTheDevice) {
  for (const bool sentence_blocks : {false, true}) {
    torch::manual_seed(0);
    SmithConfig c = Tiny("residual");
    c.dropout = 0.1;
    SmithPretraining model(SmithEncoder(c), c);
    const data::BlockBatch batch = Batch(Documents(4, 3), c, /*masks=*/true);
    testing::HostReads reads;
    const BlockTensors t = ToTensors(batch, torch::kCPU);
    const auto [total, lm, block] = model->Loss(t, sentence_blocks);
    total.backward();
    const torch::Tensor vectors = model->encoder(t);
    EXPECT_EQ(reads.seen(), std::vector<std::string>{}) << "sentence_blocks " << sentence_blocks;
    EXPECT_GT(reads.ops(), 100);
  }
  {  // DocSplit's views: the clean and the masked forward, and the loss
    const SmithConfig c = Tiny("residual");
    SmithPretraining model(SmithEncoder(c), c);
    const auto docs = Documents(4, 9);
    std::vector<const data::Document*> pointers;
    for (const auto& d : docs) pointers.push_back(&d);
    data::MaskOptions masks;
    masks.vocab_size = c.vocab_size;
    masks.masked_blocks = 0;
    const data::BlockBatch views = data::BuildDocSplitBatch(pointers, c.Blocks(), &masks, 5, 0);
    testing::HostReads reads;
    const auto [total, contrastive, lm] = model->DocSplit(ToTensors(views, torch::kCPU));
    total.backward();
    EXPECT_EQ(reads.seen(), std::vector<std::string>{}) << "DocSplit";
    EXPECT_GT(reads.ops(), 100);
  }
  // What the step used to do is seen: a boolean index counts its rows
  // through nonzero(), item() reads a scalar.
  testing::HostReads reads;
  const torch::Tensor mask = torch::tensor({true, false, true});
  EXPECT_EQ(torch::arange(3).index({mask}).size(0), 2);
  EXPECT_EQ(mask.sum().item<int64_t>(), 2);
  EXPECT_EQ(reads.seen(), (std::vector<std::string>{"aten::nonzero", "aten::item", "aten::_local_scalar_dense"}));
}

// Documents whose blocks share a vocabulary of their own: document d's
// sentences (one block each, block_length - 1 tokens) draw from ids
// [10 + 50 d, 10 + 50 d + 50). A masked block is then predictable from its
// unmasked neighbours, and only from them.
std::vector<data::Document> TopicDocuments(int count, int blocks, int64_t block_length, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<data::Document> docs;
  for (int d = 0; d < count; ++d) {
    data::Document doc;
    doc.index = d;
    doc.id = "topic-" + std::to_string(d);
    doc.sentence_offsets = {0};
    doc.paragraph_offsets = {0};
    for (int s = 0; s < blocks; ++s) {
      for (int64_t t = 0; t + 1 < block_length; ++t)
        doc.tokens.push_back(10 + 50 * d + static_cast<int32_t>(random() % 50));
      doc.sentence_offsets.push_back(doc.num_tokens());
    }
    doc.paragraph_offsets.push_back(doc.num_sentences());
    docs.push_back(std::move(doc));
  }
  return docs;
}

TEST(Smith, MaskedBlocksAreReplacedByTheMaskVectorAndTargetsAreTheUnmaskedBlockVectors) {
  torch::manual_seed(4);
  const SmithConfig c = Tiny();
  SmithPretraining model(SmithEncoder(c), c);
  model->to(torch::kFloat64);  // so that "unchanged" can mean equal to 1e-12
  model->eval();
  const auto docs = TopicDocuments(3, 5, c.block_length, 2);
  const data::BlockBatch batch = Batch(docs, c, true);
  const BlockTensors t = ToTensors(batch, torch::kCPU);
  const torch::Tensor masked_blocks = MaskedBlocks(batch);  // (3, K)
  ASSERT_EQ(masked_blocks.ge(0).sum().item<int64_t>(), 6);
  const auto out = model->forward(t, true);
  // Targets: the block vectors of the same tokens, nothing masked at block level.
  const auto blocks = model->encoder->EncodeBlocks(t.tokens, t.layout);
  std::vector<int64_t> flat;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t k = 0; k < masked_blocks.size(1); ++k) flat.push_back(b * 5 + masked_blocks[b][k].item<int64_t>());
  const torch::Tensor expected = blocks.vectors.reshape({15, -1}).index_select(0, torch::tensor(flat));
  EXPECT_TRUE(torch::allclose(out.block_originals, expected, 1e-12, 1e-14));
  // Predictions, by hand: the document transformer over the block vectors with
  // the mask vector put in at the masked positions, then the official code's
  // head, dense + GELU (erf) + LayerNorm (a head without the GELU fails this).
  {
    auto params = model->named_parameters();
    torch::Tensor inputs = blocks.vectors.clone();
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t k = 0; k < masked_blocks.size(1); ++k)
        inputs[b][masked_blocks[b][k].item<int64_t>()] = params["block_mask_vector"];
    const torch::Tensor states =
        model->encoder->EncodeDocument(inputs, t.block_mask).reshape({15, -1}).index_select(0, torch::tensor(flat));
    torch::Tensor h = states.matmul(params["block_dense.weight"].t()) + params["block_dense.bias"];
    h = 0.5 * h * (1 + torch::erf(h / std::sqrt(2.0)));
    const torch::Tensor centred = h - h.mean(1, true);
    const torch::Tensor by_hand =
        centred / (centred.pow(2).mean(1, true) + 1e-12).sqrt() * params["block_norm.weight"] +
        params["block_norm.bias"];
    EXPECT_LT((out.block_predictions - by_hand).abs().max().item<double>(), 1e-10);
  }
  // Predictions do not depend on what the masked blocks say: replacing their
  // tokens changes the targets but not a single prediction.
  BlockTensors changed = t;
  changed.tokens = t.tokens.clone();
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t k = 0; k < masked_blocks.size(1); ++k) {
      auto row = changed.tokens[b][masked_blocks[b][k].item<int64_t>()];
      row.slice(0, 1).masked_fill_(row.slice(0, 1).ne(data::kPadId), 900);
    }
  }
  const auto again = model->forward(changed, true);
  EXPECT_LT((again.block_predictions - out.block_predictions).abs().max().item<double>(), 1e-12);
  EXPECT_GT((again.block_originals - out.block_originals).abs().max().item<double>(), 1e-3);
  // What stands in for them is the learned mask vector: moving it moves
  // every prediction and no target (not by a constant, which the document
  // LayerNorm removes).
  const torch::Tensor shift = torch::linspace(-1.0, 1.0, c.hidden, torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()["block_mask_vector"].add_(shift);
  }
  const auto shifted = model->forward(t, true);
  EXPECT_LT((shifted.block_originals - out.block_originals).abs().max().item<double>(), 1e-12);
  for (int64_t m = 0; m < out.block_predictions.size(0); ++m) {
    EXPECT_GT((shifted.block_predictions[m] - out.block_predictions[m]).abs().max().item<double>(), 1e-3) << m;
  }
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()["block_mask_vector"].sub_(shift);
  }
  // ...while an unmasked block's tokens do reach them.
  BlockTensors neighbour = t;
  neighbour.tokens = t.tokens.clone();
  int64_t unmasked = 0;
  while ((masked_blocks[0] == unmasked).any().item<bool>()) ++unmasked;
  neighbour.tokens[0][unmasked].slice(0, 1).fill_(900);
  const auto moved = model->forward(neighbour, true);
  EXPECT_GT((moved.block_predictions[0] - out.block_predictions[0]).abs().max().item<double>(), 1e-8);
}

TEST(Smith, MaskedBlockTaskIsLearnedWhereItIsLearnable) {
  // The block loss alone, fresh masks each step, on documents whose blocks
  // share a vocabulary: the loss must fall well below chance, ln P.
  torch::manual_seed(6);
  SmithConfig c = Tiny();
  c.hidden = 32;
  c.intermediate = 64;
  SmithPretraining model(SmithEncoder(c), c);
  const auto docs = TopicDocuments(8, 8, c.block_length, 3);
  std::vector<const data::Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  data::MaskOptions masks;
  masks.vocab_size = c.vocab_size;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  double last = 0;
  const double chance = std::log(16.0);
  for (int step = 0; step < 300; ++step) {
    const BlockTensors t =
        ToTensors(data::BuildBlockBatch(pointers, {c.block_length, c.max_blocks}, &masks, step), torch::kCPU);
    optimizer.zero_grad();
    const auto [total, lm, block] = model->Loss(t, true);
    block.backward();
    optimizer.step();
    last = step < 280 ? 0 : last + block.item<double>() / 20;
    if (step % 50 == 0) std::cout << "[block] step " << step << " loss " << block.item<double>() << std::endl;
  }
  std::cout << "[block] last 20 steps: " << last << " (chance " << chance << ")" << std::endl;
  EXPECT_LT(last, 0.5 * chance);
}

TEST(Smith, SiameseTowersShareEveryParameter) {
  // The pair gradient must be the sum of what each tower contributes to the
  // same parameters (SMITH's official code once built two encoders).
  torch::manual_seed(5);
  const SmithConfig c = Tiny();
  SmithEncoder encoder(c);
  const auto docs = Documents(4, 13);
  const BlockTensors a = ToTensors(Batch({docs[0], docs[1]}, c, false), torch::kCPU);
  const BlockTensors b = ToTensors(Batch({docs[2], docs[3]}, c, false), torch::kCPU);
  const torch::Tensor labels = torch::tensor({1.0, 0.0});
  auto gradients = [&](bool through_a, bool through_b) {
    encoder->zero_grad();
    torch::Tensor va = encoder(a), vb = encoder(b);
    if (!through_a) va = va.detach();
    if (!through_b) vb = vb.detach();
    SiameseCosineLoss(va, vb, labels, c.amplifier).backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : encoder->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  const auto both = gradients(true, true), only_a = gradients(true, false), only_b = gradients(false, true);
  encoder->zero_grad();
  SiameseLoss(encoder, a, b, labels).backward();
  const auto params = encoder->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i].grad(), both[i], 1e-6, 1e-7));
    EXPECT_TRUE(torch::allclose(both[i], only_a[i] + only_b[i], 1e-5, 1e-7));
  }
  // Identical documents in both towers: cosine 1, loss = log(1 + e^-amplifier).
  const torch::Tensor same = SiameseLoss(encoder, a, a, torch::tensor({1.0, 1.0}));
  EXPECT_NEAR(same.item<double>(), std::log1p(std::exp(-c.amplifier)), 1e-5);
}

TEST(Smith, TrainingOnATinyRealBatchDrivesTheLossDown) {
  // Real English text that every Debian machine has: the GPL, as 8 documents.
  data::testing::ScratchDir dir("smith-train");
  const testing::RealText gpl = testing::GplDocuments(dir, 8);
  if (gpl.documents.empty()) GTEST_SKIP() << "no GPL text on this machine";
  const std::vector<data::Document>& docs = gpl.documents;

  torch::manual_seed(0);
  SmithConfig c = Tiny();
  c.vocab_size = gpl.vocab_size;
  c.hidden = 32;
  c.intermediate = 64;
  c.block_length = 16;
  c.max_blocks = 8;
  SmithPretraining model(SmithEncoder(c), c);
  const BlockTensors t = ToTensors(Batch(docs, c, true), torch::kCPU);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    optimizer.zero_grad();
    const auto [loss, lm, block] = model->Loss(t, true);
    loss.backward();
    optimizer.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  std::cout << "[train] SMITH-WP+SP tiny, 300 steps: loss " << first << " -> " << last << std::endl;
  EXPECT_LT(last, first / 5) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace docmatch::model

namespace docmatch::model {
namespace {

TEST(Smith, PretrainingFlopsCountTheMatrixProductsByHand) {
  SmithConfig c;
  c.hidden = 2;
  c.intermediate = 4;
  c.vocab_size = 10;
  c.sentence_layers = 1;
  c.document_layers = 1;
  data::BlockBatch batch;
  batch.B = 1;
  batch.S = 2;
  batch.T = 3;
  batch.block_mask = {1, 1};
  batch.tokens = {data::kClsId, 20, data::kPadId, data::kClsId, 21, 22};  // 2 and 3 real tokens
  batch.lm_labels = {-100, 7, -100, -100, -100, -100};                    // one predicted token
  batch.masked_blocks = {-1};
  // Sentence layer over the real tokens of blocks of 2 and 3: 8*(2+3)*4 +
  // 4*(2+3)*2*4 + 4*(4+9)*2 = 160 + 160 + 104; block vectors 2*2*4 = 16;
  // LM head 2*1*2*(2 + 10) = 48: 488 forward.
  EXPECT_DOUBLE_EQ(SmithPretrainingFlops(c, batch, /*document_level=*/false), 3 * 488.0);
  // Document layer over 1 document of 2 blocks: 8*1*2*4 + 4*1*2*2*4 + 4*1*4*2 = 160.
  EXPECT_DOUBLE_EQ(SmithPretrainingFlops(c, batch, true), 3 * (488.0 + 160));
  // One masked block adds its projection 2*1*4 and its score row 2*1*1*2.
  batch.masked_blocks = {1};
  EXPECT_DOUBLE_EQ(SmithPretrainingFlops(c, batch, true), 3 * (488.0 + 160 + 8 + 4));
}

}  // namespace
}  // namespace docmatch::model
