// DocumentModel: for every kind of the registry, the score matrix equals the pair logits of
// every pair, a document's vector does not depend on its batch, fine-tuning
// reads no value back from the device, and the config survives the JSON
// that checkpoints carry; SMASH's factored score
// matrix equals its head on concatenated pairs; SDR's document vector is the
// normalised mean of its sentence vectors; SMITH's passes padded to their step
// buckets give the unpadded vectors and gradients.
#include "model/document_model.h"

#include <gtest/gtest.h>

#include "../data/test_corpus.h"
#include "data/batches/blocks.h"
#include "data/batches/step_buckets.h"
#include "host_reads.h"

namespace docmatch::model {
namespace {

ModelConfig Tiny(const std::string& kind) {
  ModelConfig c;
  c.kind = kind;
  c.smith.vocab_size = c.match_bert.vocab_size = c.sdr.vocab_size = c.smash.vocab_size = 1005;
  c.smith.hidden = c.match_bert.hidden = c.sdr.hidden = 16;
  c.smith.heads = c.match_bert.heads = c.sdr.heads = 2;
  c.smith.intermediate = c.match_bert.intermediate = c.sdr.intermediate = 32;
  c.smith.sentence_layers = c.smith.document_layers = c.match_bert.layers = c.sdr.layers = 1;
  c.smith.block_length = 8;
  c.smith.max_blocks = 6;
  c.match_bert.max_tokens = 40;
  c.sdr.max_tokens = 16;
  c.smash.embedding = 8;
  c.smash.gru_units = 4;
  c.smash.pair_hidden = 8;
  c.bag = {/*vocab_size=*/1005, /*hidden=*/16, /*max_tokens=*/20, /*amplifier=*/6.0};
  return c;
}

class EveryKind : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryKind, ScoreMatrixEqualsPairLogitsAndVectorsIgnoreTheirBatch) {
  torch::manual_seed(3);
  std::unique_ptr<DocumentModel> model = DocumentModel::Create(Tiny(GetParam()));
  model->module().eval();
  torch::NoGradGuard no_grad;
  std::vector<data::Document> docs;
  for (int i = 0; i < 5; ++i) docs.push_back(data::testing::SyntheticDocument(i, 11));
  std::vector<const data::Document*> all;
  for (const auto& d : docs) all.push_back(&d);
  const torch::Tensor vectors = model->Embed(all, torch::kCPU);
  ASSERT_EQ(vectors.sizes(), (std::vector<int64_t>{5, model->dimension()}));
  for (int i = 0; i < 5; ++i) {
    const torch::Tensor alone = model->Embed({all[i]}, torch::kCPU);
    EXPECT_TRUE(torch::allclose(alone[0], vectors[i], 1e-5, 1e-5)) << GetParam() << " document " << i;
  }
  const torch::Tensor matrix = model->ScoreMatrix(vectors.slice(0, 0, 2), vectors);
  for (int64_t q = 0; q < 2; ++q) {
    const torch::Tensor pairs = model->PairLogits(vectors[q].unsqueeze(0).expand({5, -1}), vectors);
    EXPECT_TRUE(torch::allclose(matrix[q], pairs, 1e-5, 1e-5)) << GetParam() << "\n" << matrix[q] << pairs;
  }
}

TEST_P(EveryKind, ConfigRoundTripsThroughJson) {
  ModelConfig config = Tiny(GetParam());
  SetVocabSize(&config, 777);
  EXPECT_EQ(VocabSize(config), 777);
  const nlohmann::json json = ModelConfigToJson(config);
  EXPECT_EQ(json.at("kind"), GetParam());
  EXPECT_EQ(ModelConfigToJson(ModelConfigFromJson(json, "test")), json);
  nlohmann::json typo = json;
  typo["hiden"] = 3;
  EXPECT_THROW(ModelConfigFromJson(typo, "test"), std::runtime_error);
}

// Fine-tuning's forward and backward read no tensor value back to the host
// (host_reads.h): on a GPU they make no host sync, whatever the batch's
// padding. Where a model's packing needs indices or lengths, they come from
// the batch's host arrays.
TEST_P(EveryKind, FineTuningStepReadsNoValueBackFromTheDevice) {
  torch::manual_seed(3);
  std::unique_ptr<DocumentModel> model = DocumentModel::Create(Tiny(GetParam()));
  model->module().train();
  std::vector<data::Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(data::testing::SyntheticDocument(i, 13));
  std::vector<const data::Document*> all;
  for (const auto& d : docs) all.push_back(&d);
  const std::shared_ptr<const DocumentModel::HostBatch> batch = model->Batch(all);
  testing::HostReads reads;
  const torch::Tensor vectors = model->EmbedBatch(*batch, torch::kCPU);  // (4, dimension)
  model->ScoreMatrix(vectors, vectors).logsumexp(1).sum().backward();
  EXPECT_EQ(reads.seen(), std::vector<std::string>{}) << GetParam();
  EXPECT_GT(reads.ops(), 20);
}

// Every row of the kind registry: a kind added there is tested here.
std::vector<std::string> KindNames() {
  std::vector<std::string> names;
  for (const ModelKind* kind : ModelKinds()) names.emplace_back(kind->name);
  return names;
}
INSTANTIATE_TEST_SUITE_P(DocumentModel, EveryKind, ::testing::ValuesIn(KindNames()));

TEST(DocumentModel, SmashFactoredScoreMatrixEqualsTheHeadOnConcatenatedPairs) {
  torch::manual_seed(5);
  SmashPair pair(Tiny("smash").smash);
  pair->eval();
  const torch::Tensor q = torch::randn({3, 24}), c = torch::randn({7, 24});
  const torch::Tensor matrix = pair->ScoreMatrix(q, c);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 7; ++j) {
      const double head = pair->Head(q[i].unsqueeze(0), c[j].unsqueeze(0)).item<double>();
      EXPECT_NEAR(matrix[i][j].item<double>(), head, 1e-5) << i << "," << j;
    }
  }
}

TEST(DocumentModel, SdrVectorIsTheNormalisedMeanOfItsSentenceVectors) {
  torch::manual_seed(7);
  std::unique_ptr<DocumentModel> model = DocumentModel::Create(Tiny("sdr"));
  model->module().eval();
  torch::NoGradGuard no_grad;
  const data::Document doc = data::testing::SyntheticDocument(4, 11);
  const std::vector<DocumentSentences> sentences = model->EmbedSentences({&doc}, torch::kCPU);
  ASSERT_EQ(sentences[0].vectors.size(0), doc.num_sentences());
  EXPECT_EQ(sentences[0].paragraph_offsets, doc.paragraph_offsets);
  EXPECT_TRUE(torch::allclose(sentences[0].vectors.norm(2, 1), torch::ones({doc.num_sentences()}), 1e-5, 1e-5));
  const torch::Tensor mean = sentences[0].vectors.mean(0);
  EXPECT_TRUE(torch::allclose(model->Embed({&doc}, torch::kCPU)[0], mean / mean.norm(), 1e-5, 1e-5));
  EXPECT_FALSE(DocumentModel::Create(Tiny("smith"))->has_sentences());
}


// finetune --step-buckets: SMITH's embedding passes padded to their step
// buckets give the unpadded passes' vectors and parameter gradients
// (float64, dropout off), over passes of documents of unlike lengths whose
// buckets do pad; the other kinds do not take step buckets.
TEST(DocumentModel, SmithPassesPaddedToTheirStepBucketsGiveTheUnpaddedVectors) {
  ModelConfig config = Tiny("smith");
  config.smith.dropout = 0.0;
  torch::manual_seed(5);
  std::unique_ptr<DocumentModel> plain = DocumentModel::Create(config);
  torch::manual_seed(5);
  std::unique_ptr<DocumentModel> padded = DocumentModel::Create(config);
  plain->module().to(torch::kFloat64);
  padded->module().to(torch::kFloat64);
  ASSERT_TRUE(padded->takes_step_buckets());
  padded->set_step_buckets(true);
  std::vector<data::Document> docs;
  for (int i = 0; i < 12; ++i) docs.push_back(data::testing::SyntheticDocument(i, 3 + i % 4));
  int padded_passes = 0;
  for (int start = 0; start + 4 <= 12; start += 4) {
    std::vector<const data::Document*> pass;
    for (int i = start; i < start + 4; ++i) pass.push_back(&docs[i]);
    const auto host = plain->Batch(pass);
    const data::BlockBatch& b = BatchOf<data::BlockBatch>(*host);
    const data::StepCounts counts = data::CountStep(b);
    const data::StepShape shape = data::BucketFor(counts, b.B, b.K, config.smith.Blocks(), data::StepBuckets{});
    padded_passes += shape.R > counts.R && shape.N > counts.N;
    for (auto* m : {plain.get(), padded.get()}) m->module().zero_grad();
    const torch::Tensor a = plain->EmbedBatch(*host, torch::kCPU), v = padded->EmbedBatch(*host, torch::kCPU);
    ASSERT_EQ(v.sizes(), a.sizes());
    EXPECT_LT((a - v).abs().max().item<double>(), 1e-12) << "pass from " << start;
    const torch::Tensor weights = torch::randn(a.sizes(), torch::kFloat64);
    (a * weights).sum().backward();
    (v * weights).sum().backward();
    const auto pa = plain->module().named_parameters(), pv = padded->module().named_parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      const torch::Tensor& ga = pa[i].value().grad();
      const torch::Tensor& gv = pv[i].value().grad();
      ASSERT_EQ(ga.defined(), gv.defined()) << pa[i].key();
      if (ga.defined()) EXPECT_LT((ga - gv).abs().max().item<double>(), 1e-11) << pa[i].key() << ", pass " << start;
    }
  }
  EXPECT_GT(padded_passes, 0) << "no pass was padded: the test compares nothing";
  for (const std::string& kind : KindNames()) {
    if (kind != "smith") EXPECT_FALSE(DocumentModel::Create(Tiny(kind))->takes_step_buckets()) << kind;
  }
}

}  // namespace
}  // namespace docmatch::model
