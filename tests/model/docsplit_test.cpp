// DocSplit: the loss against float64, and the objective on SMITH.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "../data/test_corpus.h"
#include "data/batches/docsplit.h"
#include "model/losses.h"
#include "model/match_bert.h"
#include "model/smith.h"
#include "real_text.h"

namespace docmatch::model {
namespace {

// A SMITH small enough to train in a test, dropout off.
SmithConfig Small(int64_t vocab_size) {
  SmithConfig c;
  c.vocab_size = vocab_size;
  c.hidden = 32;
  c.heads = 2;
  c.intermediate = 64;
  c.sentence_layers = 1;
  c.document_layers = 1;
  c.block_length = 8;
  c.max_blocks = 16;
  c.dropout = 0.0;
  return c;
}

TEST(DocSplitLoss, EqualsAFloat64HandComputation) {
  // Four views: halves (0, 2) of document 0 and (1, 3) of document 1.
  const std::vector<std::vector<double>> v = {{1, 0, 0}, {0.2, 1, 0}, {0.9, 0.1, 0.3}, {0, 0.8, -0.5}};
  const double tau = 0.05;
  auto cosine = [](const std::vector<double>& x, const std::vector<double>& y) {
    double dot = 0, nx = 0, ny = 0;
    for (int i = 0; i < 3; ++i) dot += x[i] * y[i], nx += x[i] * x[i], ny += y[i] * y[i];
    return dot / std::sqrt(nx * ny);
  };
  double expected = 0;
  for (int i = 0; i < 4; ++i) {
    const int partner = (i + 2) % 4;
    double sum = 0;
    for (int j = 0; j < 4; ++j) {
      if (j != i) sum += std::exp(cosine(v[i], v[j]) / tau);
    }
    expected += (std::log(sum) - cosine(v[i], v[partner]) / tau) / 4;
  }
  torch::Tensor views = torch::empty({4, 3});
  for (int i = 0; i < 4; ++i) views[i] = torch::tensor({v[i][0], v[i][1], v[i][2]});
  const torch::Tensor self = torch::arange(4);
  const double loss = DocSplitLoss(views, views, self, (self + 2) % 4, tau).item<double>();
  EXPECT_NEAR(loss, expected, 1e-4 * std::max(1.0, expected));
}

TEST(DocSplit, SmithObjectiveGivesGradientsAndLearns) {
  torch::manual_seed(0);
  data::testing::ScratchDir dir("docsplit-train");
  const testing::RealText gpl = testing::GplDocuments(dir, 6);
  if (gpl.documents.empty()) GTEST_SKIP() << "no GPL text on this machine";
  const SmithConfig c = Small(gpl.vocab_size);
  SmithPretraining model(SmithEncoder(c), c);
  std::vector<const data::Document*> documents;
  for (const auto& d : gpl.documents) documents.push_back(&d);
  data::MaskOptions masks;
  masks.vocab_size = c.vocab_size;
  masks.masked_blocks = 0;
  const data::BlockBatch batch = data::BuildDocSplitBatch(documents, {8, 16}, &masks, /*seed=*/1, /*epoch=*/0);
  ASSERT_EQ(batch.B, 12);
  const BlockTensors t = ToTensors(batch, torch::kCPU);

  const auto [total, contrastive, lm] = model->DocSplit(t);
  EXPECT_NEAR(total.item<double>(), contrastive.item<double>() + 0.1 * lm.item<double>(), 1e-5);
  total.backward();
  for (const auto& p : model->named_parameters()) {
    // The sentence-block head and mask vector belong to SMITH's SP objective.
    if (p.key().rfind("block_", 0) == 0) continue;
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(3e-3));
  const double before = contrastive.item<double>();
  double after = before;
  for (int step = 0; step < 100; ++step) {
    optimizer.zero_grad();
    const auto [loss, nce, unused] = model->DocSplit(t);
    loss.backward();
    optimizer.step();
    after = nce.item<double>();
  }
  // 11 candidates per view: chance is log(11) = 2.4; learning separates them.
  std::cout << "[train] DocSplit on SMITH, GPL text, 100 steps: InfoNCE " << before << " -> " << after << std::endl;
  EXPECT_LT(after, before / 4) << before << " -> " << after;
}

// The paper (after SimCSE): InfoNCE sees clean views, the word LM a masked
// copy. So the vectors from a masked batch equal those from the same views
// built without masks, and the LM term equals the word-LM objective's on
// the masked batch. Both encoders.
TEST(DocSplit, ContrastiveViewsAreCleanAndTheLanguageModelSeesTheMasks) {
  std::vector<data::Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(data::testing::SyntheticDocument(i, 40));
  std::vector<const data::Document*> documents;
  for (const auto& d : docs) documents.push_back(&d);
  data::MaskOptions masks;
  masks.vocab_size = 1005;
  masks.masked_blocks = 0;

  torch::manual_seed(0);
  const SmithConfig c = Small(1005);  // test_corpus.h's synthetic ids run to 1004
  SmithPretraining smith(SmithEncoder(c), c);
  const BlockTensors masked = ToTensors(data::BuildDocSplitBatch(documents, {8, 16}, &masks, 5, 0), torch::kCPU);
  const BlockTensors clean = ToTensors(data::BuildDocSplitBatch(documents, {8, 16}, nullptr, 5, 0), torch::kCPU);
  ASSERT_FALSE(torch::equal(masked.tokens, clean.tokens));
  const auto views = smith->ForwardViews(masked, true);
  EXPECT_TRUE(torch::allclose(views.vectors, smith->ForwardViews(clean, false).vectors, 1e-6, 1e-7));
  EXPECT_FALSE(torch::allclose(views.vectors, smith->encoder(masked), 1e-3, 1e-4))
      << "the masks should change a masked forward's vectors, or this test proves nothing";
  const auto [unused_total, lm, unused_block] = smith->Loss(masked, false);
  EXPECT_NEAR(smith->LanguageModelLoss(views.lm_hidden, views.lm_labels).item<double>(), lm.item<double>(), 1e-6);

  MatchBertConfig m;
  m.vocab_size = 1005;
  m.hidden = 16;
  m.heads = 2;
  m.intermediate = 32;
  m.layers = 1;
  m.max_tokens = 32;
  m.dropout = 0.0;
  FlatPretraining flat(FlatEncoder(m), m);
  const data::FlatBatch flat_masked = data::BuildFlatDocSplitBatch(documents, m.Flat(), &masks, 5, 0);
  const data::FlatBatch flat_clean = data::BuildFlatDocSplitBatch(documents, m.Flat(), nullptr, 5, 0);
  ASSERT_NE(flat_masked.tokens, flat_clean.tokens);
  const auto flat_views = flat->ForwardViews(flat_masked, torch::kCPU, true);
  EXPECT_TRUE(
      torch::allclose(flat_views.vectors, flat->ForwardViews(flat_clean, torch::kCPU, false).vectors, 1e-6, 1e-7));
  const auto plain = flat->forward(flat_masked, torch::kCPU);
  EXPECT_FALSE(torch::allclose(flat_views.vectors, plain.vectors, 1e-3, 1e-4));
  EXPECT_TRUE(torch::equal(flat_views.lm_labels, plain.lm_labels));
  EXPECT_TRUE(torch::allclose(flat_views.lm_hidden, plain.lm_hidden, 1e-6, 1e-7));
}

}  // namespace
}  // namespace docmatch::model
