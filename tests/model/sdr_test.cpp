// SDR: the contrastive loss against float64, and the sentence encoder.
#include "model/sdr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "../data/test_corpus.h"
#include "data/text/tokenizer.h"
#include "host_reads.h"
#include "model/losses.h"
#include "real_text.h"

namespace docmatch::model {
namespace {

TEST(SdrContrastiveLoss, EqualsAFloat64HandComputation) {
  const std::vector<std::vector<double>> anchors = {{1, 0}, {0.6, 0.8}, {-1, 0.2}};
  const std::vector<std::vector<double>> candidates = {{0.8, 0.6}, {0, 1}, {1, 1}};
  const std::vector<int64_t> pair = {0, 2, 1};
  const std::vector<double> labels = {1, 0, 0};
  for (double margin : {1.0, 0.5}) {
    double expected = 0;
    for (size_t i = 0; i < anchors.size(); ++i) {
      const auto& a = anchors[i];
      const auto& c = candidates[pair[i]];
      const double cosine = (a[0] * c[0] + a[1] * c[1]) / std::hypot(a[0], a[1]) / std::hypot(c[0], c[1]);
      expected += (labels[i] == 1 ? 1 - cosine : std::max(0.0, cosine - (1 - margin))) / anchors.size();
    }
    auto tensor = [](const std::vector<std::vector<double>>& v) {
      torch::Tensor t = torch::empty({static_cast<int64_t>(v.size()), 2});
      for (size_t i = 0; i < v.size(); ++i) t[i] = torch::tensor({v[i][0], v[i][1]});
      return t;
    };
    const double loss = SdrContrastiveLoss(tensor(anchors), tensor(candidates), torch::tensor(pair),
                                           torch::tensor({1.0, 0.0, 0.0}), margin)
                            .item<double>();
    EXPECT_NEAR(loss, expected, 1e-6) << "margin " << margin;
  }
}

TEST(SentenceEncoder, SentencesTooShortForTheirMarksAreRefused) {
  SdrConfig c;
  c.vocab_size = 1005;
  c.hidden = 32;
  c.heads = 2;
  c.intermediate = 64;
  c.layers = 1;
  c.max_tokens = 2;
  EXPECT_NO_THROW(SentenceEncoder{c});  // two words a sentence
  c.separator = true;                   // [CLS] and [SEP] would leave none
  try {
    SentenceEncoder encoder(c);
    FAIL() << "max_tokens 2 with separator was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 3"), std::string::npos) << e.what();
  }
}

// A small sentence encoder over test_corpus.h's ids, without dropout.
SdrConfig Small() {
  SdrConfig c;
  c.vocab_size = 1005;
  c.hidden = 32;
  c.heads = 2;
  c.intermediate = 64;
  c.layers = 2;
  c.max_tokens = 16;
  c.dropout = 0.0;
  return c;
}

TEST(SentenceEncoder, MeanPoolsRealTokensGetsGradientsAndLearns) {
  torch::manual_seed(0);
  const SdrConfig c = Small();
  SentenceEncoder encoder(c);
  encoder->eval();
  // Padding invariance of the mean pool.
  const torch::Tensor tokens = torch::tensor({7L, 8L, 9L, 0L, 0L, 11L, 12L, 13L, 14L, 15L}).view({2, 5});
  const torch::Tensor vectors = encoder(tokens);
  EXPECT_TRUE(torch::allclose(encoder(tokens.slice(0, 0, 1).slice(1, 0, 3)), vectors.slice(0, 0, 1), 1e-5, 1e-6));
  encoder->train();

  data::testing::ScratchDir dir("sdr-train");
  const testing::RealText gpl = testing::GplDocuments(dir, 16, /*vocab_size=*/1005);
  if (gpl.documents.empty()) GTEST_SKIP() << "no GPL text on this machine";
  ASSERT_LE(gpl.vocab_size, c.vocab_size);
  std::vector<const data::Document*> pointers;
  for (const auto& d : gpl.documents) pointers.push_back(&d);
  data::MaskOptions masks;
  masks.vocab_size = c.vocab_size;
  const SdrTensors t = ToTensors(data::BuildSdrBatch(pointers, {c.max_tokens}, &masks, 0), torch::kCPU);
  const auto [total, contrastive, lm] = encoder->Loss(t);
  EXPECT_NEAR(total.item<double>(), contrastive.item<double>() + lm.item<double>(), 1e-5);
  total.backward();
  for (const auto& p : encoder->named_parameters()) {
    if (p.key() == "embeddings.positions.weight") continue;  // rows past T get none
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
  torch::optim::Adam optimizer(encoder->parameters(), torch::optim::AdamOptions(3e-3));
  const double before = total.item<double>();
  double after = before;
  for (int step = 0; step < 150; ++step) {
    optimizer.zero_grad();
    const auto [loss, unused1, unused2] = encoder->Loss(t);
    loss.backward();
    optimizer.step();
    after = loss.item<double>();
  }
  std::cout << "[train] SDR sentence encoder, GPL text, 150 steps: loss " << before << " -> " << after << std::endl;
  EXPECT_LT(after, before / 4) << before << " -> " << after;
}

// SDR's pre-training step (masked LM and the pair loss, forward and
// backward) reads no value back to the host (host_reads.h).
TEST(SentenceEncoder, PretrainingStepReadsNoValueBackFromTheDevice) {
  torch::manual_seed(0);
  const SdrConfig c = Small();
  SentenceEncoder encoder(c);
  std::vector<data::Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(data::testing::SyntheticDocument(i, 17));
  std::vector<const data::Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  data::MaskOptions masks;
  masks.vocab_size = c.vocab_size;
  const data::SdrBatch batch = data::BuildSdrBatch(pointers, {c.max_tokens}, &masks, 0);
  testing::HostReads reads;
  const auto [total, contrastive, lm] = encoder->Loss(ToTensors(batch, torch::kCPU));
  total.backward();
  EXPECT_EQ(reads.seen(), std::vector<std::string>{});
  EXPECT_GT(reads.ops(), 20);
}

}  // namespace
}  // namespace docmatch::model
