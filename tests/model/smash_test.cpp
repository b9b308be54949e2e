// SMASH RNN and HAN: shapes per depth, padding invariance, gradients, the
// pair loss against float64, and learning on a tiny batch.
#include "model/smash.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "../data/test_corpus.h"
#include "real_text.h"

namespace docmatch::model {
namespace {

SmashConfig Tiny(const std::string& depths) {
  SmashConfig c;
  c.vocab_size = 1005;
  c.embedding = 16;
  c.gru_units = 8;
  c.depths = depths;
  c.pair_hidden = 16;
  c.dropout = 0.0;
  return c;
}

HierarchyTensors Batch(const std::vector<const data::Document*>& docs) {
  return ToTensors(data::BuildHierarchyBatch(docs, {}), torch::kCPU);
}

int64_t Count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(Smash, ShapesForEveryDepthChoiceAndHan) {
  std::vector<data::Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(data::testing::SyntheticDocument(i, 4));
  const HierarchyTensors t = Batch({&docs[0], &docs[1], &docs[2]});
  for (const auto& [depths, width] :
       std::vector<std::pair<std::string, int64_t>>{{"P", 16}, {"P+S", 32}, {"P+S+W", 48}, {"S", 16}, {"W", 16}}) {
    torch::manual_seed(0);
    SmashEncoder encoder(Tiny(depths));
    EXPECT_EQ(encoder->output_size(), width) << depths;
    EXPECT_EQ(encoder(t).sizes(), (std::vector<int64_t>{3, width})) << depths;
  }
  EXPECT_THROW(SmashEncoder(Tiny("P+X")), c10::Error);
}

TEST(Smash, PaddingAtEveryDepthDoesNotChangeADocumentsVector) {
  // A short document alone, then beside a long one (more paragraphs,
  // sentences, words): every padded unit must be invisible.
  const data::Document small = data::testing::SyntheticDocument(10, 3);
  data::Document large = data::testing::SyntheticDocument(11, 3);
  for (int i = 12; i < 16; ++i) {  // make it longer at every depth
    data::testing::AppendDocument(&large, data::testing::SyntheticDocument(i, 3));
  }
  torch::manual_seed(0);
  SmashEncoder encoder(Tiny("P+S+W"));
  encoder->eval();
  const torch::Tensor alone = encoder(Batch({&small}));
  const torch::Tensor together = encoder(Batch({&large, &small}));
  EXPECT_TRUE(torch::allclose(together[1], alone[0], 1e-5, 1e-6));
}

TEST(Smash, EveryParameterGetsAGradientAndThePairLossIsBce) {
  torch::manual_seed(1);
  SmashPair model(Tiny("P+S+W"));
  std::vector<data::Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(data::testing::SyntheticDocument(i, 8));
  const HierarchyTensors a = Batch({&docs[0], &docs[1]}), b = Batch({&docs[2], &docs[3]});
  const torch::Tensor labels = torch::tensor({1.0, 0.0});
  const torch::Tensor logits = model(a, b).to(torch::kFloat64);
  double expected = 0;
  for (int i = 0; i < 2; ++i) {
    const double p = 1 / (1 + std::exp(-logits[i].item<double>()));
    expected += -(labels[i].item<double>() * std::log(p) + (1 - labels[i].item<double>()) * std::log(1 - p)) / 2;
  }
  const torch::Tensor loss = model->Loss(a, b, labels);
  EXPECT_NEAR(loss.item<double>(), expected, 1e-6);
  loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

TEST(Smash, LearnsATinySetOfPairs) {
  data::testing::ScratchDir dir("smash-train");
  const testing::RealText gpl = testing::GplDocuments(dir, 8, /*vocab_size=*/1005);
  if (gpl.documents.empty()) GTEST_SKIP() << "no GPL text on this machine";
  const std::vector<data::Document>& docs = gpl.documents;
  torch::manual_seed(2);
  SmashPair model(Tiny("P+S"));
  const HierarchyTensors a = Batch({&docs[0], &docs[1], &docs[2], &docs[3]});
  const HierarchyTensors b = Batch({&docs[4], &docs[5], &docs[6], &docs[7]});
  const torch::Tensor labels = torch::tensor({1.0, 0.0, 0.0, 1.0});
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    optimizer.zero_grad();
    const torch::Tensor loss = model->Loss(a, b, labels);
    loss.backward();
    optimizer.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  std::cout << "[train] SMASH P+S pairs, GPL text, 80 steps: BCE " << first << " -> " << last << std::endl;
  EXPECT_LT(last, first / 10) << first << " -> " << last;
}

TEST(Smash, PaperSizedParameterCount) {
  // 256-d embeddings, 128 GRU units per direction, P+S+W, 16K vocabulary.
  SmashConfig c;
  SmashPair pair(c);
  const int64_t gru = [](int64_t in, int64_t u) { return 2 * (3 * u * in + 3 * u * u + 6 * u); }(256, 128);
  const int64_t gru_hidden_in = 2 * (3 * 128 * 256 + 3 * 128 * 128 + 6 * 128);
  const int64_t pooling = 256 * 256 + 256 + 256;
  // Embedding + 5 GRU levels (2 read words, 3 read 256-d vectors) + 5 poolings + head.
  const int64_t expected = 16000 * 256 + 2 * gru + 3 * gru_hidden_in + 5 * pooling + (2 * 768 * 256 + 256) + (256 + 1);
  EXPECT_EQ(Count(*pair), expected);
  std::cout << "[model] SMASH P+S+W paper size: " << Count(*pair->encoder) << " encoder parameters, " << Count(*pair)
            << " with the pair head" << std::endl;
}

}  // namespace
}  // namespace docmatch::model
