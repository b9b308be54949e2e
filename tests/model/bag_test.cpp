// The bag of embeddings (model/bag.h) against its definition computed here
// in float64: a document's vector is the unit mean of its first max_tokens
// token embeddings; tokens past max_tokens change nothing; its gradient is
// the mean's, spread evenly over the rows of the tokens read.
#include "model/bag.h"

#include <gtest/gtest.h>

#include "../data/test_corpus.h"
#include "model/config.h"
#include "model/document_model.h"

namespace docmatch::model {
namespace {

ModelConfig Bag(int64_t max_tokens) {
  ModelConfig config;
  config.kind = "bag";
  config.bag = {/*vocab_size=*/1005, /*hidden=*/12, /*max_tokens=*/max_tokens, /*amplifier=*/6.0};
  return config;
}

// The unit mean of `table`'s rows of the document's first n tokens, in float64.
std::vector<double> HandVector(const torch::Tensor& table, const data::Document& document, int64_t n) {
  const auto rows = table.accessor<double, 2>();
  std::vector<double> mean(table.size(1), 0.0);
  n = std::min(n, document.num_tokens());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < table.size(1); ++c) mean[c] += rows[document.tokens[t]][c] / n;
  }
  double norm = 0;
  for (double v : mean) norm += v * v;
  for (double& v : mean) v /= std::sqrt(norm);
  return mean;
}

TEST(Bag, VectorIsTheUnitMeanOfTheFirstTokensEmbeddings) {
  torch::manual_seed(1);
  std::unique_ptr<DocumentModel> model = DocumentModel::Create(Bag(/*max_tokens=*/30));
  model->module().to(torch::kDouble);
  const torch::Tensor table = model->module().named_parameters()["embeddings.tokens.weight"].detach();
  std::vector<data::Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(data::testing::SyntheticDocument(i, 9 + 4 * i));  // some past 30 tokens
  std::vector<const data::Document*> all;
  for (const auto& d : docs) all.push_back(&d);
  torch::NoGradGuard no_grad;
  const torch::Tensor vectors = model->Embed(all, torch::kCPU);  // (4, 12)
  ASSERT_EQ(vectors.sizes(), (std::vector<int64_t>{4, 12}));
  bool truncated = false;
  for (int64_t d = 0; d < 4; ++d) {
    truncated = truncated || docs[d].num_tokens() > 30;
    EXPECT_EQ(model->TokensRead(docs[d]), std::min<int64_t>(docs[d].num_tokens(), 30));
    const std::vector<double> hand = HandVector(table, docs[d], 30);
    for (int64_t c = 0; c < 12; ++c) EXPECT_NEAR(vectors[d][c].item<double>(), hand[c], 1e-12) << d << "," << c;
  }
  EXPECT_TRUE(truncated) << "no document longer than max_tokens: the cut is untested";
}

TEST(Bag, TokensPastMaxTokensChangeNothing) {
  torch::manual_seed(2);
  std::unique_ptr<DocumentModel> model = DocumentModel::Create(Bag(/*max_tokens=*/10));
  data::Document doc = data::testing::SyntheticDocument(3, 20);
  ASSERT_GT(doc.num_tokens(), 12);
  torch::NoGradGuard no_grad;
  const torch::Tensor before = model->Embed({&doc}, torch::kCPU);
  doc.tokens[11] = doc.tokens[11] == 7 ? 8 : 7;  // past the cut
  EXPECT_TRUE(torch::equal(model->Embed({&doc}, torch::kCPU), before));
  doc.tokens[3] = doc.tokens[3] == 7 ? 8 : 7;  // within it
  EXPECT_FALSE(torch::equal(model->Embed({&doc}, torch::kCPU), before));
}

// d(u . v)/d(row of token t), v the unit mean m/|m| of n rows:
// (u - (u . v) v) / (n |m|) for each occurrence of t among the n.
TEST(Bag, GradientIsTheUnitMeansSpreadOverTheTokensRead) {
  torch::manual_seed(3);
  std::unique_ptr<DocumentModel> model = DocumentModel::Create(Bag(/*max_tokens=*/16));
  model->module().to(torch::kDouble);
  torch::Tensor table = model->module().named_parameters()["embeddings.tokens.weight"];
  const data::Document doc = data::testing::SyntheticDocument(5, 30);
  const torch::Tensor u = torch::randn({12}, torch::kDouble);
  (model->Embed({&doc}, torch::kCPU)[0] * u).sum().backward();
  const int64_t n = std::min<int64_t>(16, doc.num_tokens());
  torch::Tensor mean = torch::zeros({12}, torch::kDouble);
  torch::Tensor count = torch::zeros({1005}, torch::kDouble);
  for (int64_t t = 0; t < n; ++t) {
    mean += table.detach()[doc.tokens[t]] / n;
    count[doc.tokens[t]] += 1;
  }
  const torch::Tensor v = mean / mean.norm();
  const torch::Tensor per_row = (u - (u * v).sum() * v) / (n * mean.norm());  // (12,)
  const torch::Tensor expected = count.unsqueeze(1) * per_row.unsqueeze(0);   // (1005, 12)
  EXPECT_LT((table.grad() - expected).abs().max().item<double>(), 1e-12);
  EXPECT_GT(count.gt(0).sum().item<int64_t>(), 3);
}

}  // namespace
}  // namespace docmatch::model
