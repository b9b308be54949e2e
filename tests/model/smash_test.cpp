// SMASH RNN and HAN: shapes per depth, padding invariance, each depth its own
// RNN, the sentence depth against a one-sentence-at-a-time formulation,
// truncation from the model config, gradients, the pair loss against float64,
// and learning on a tiny batch.
#include "model/smash.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <set>

#include "../data/test_corpus.h"
#include "model/document_model.h"
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

// A document from paragraphs of sentences of token ids.
data::Document Make(const std::vector<std::vector<std::vector<int32_t>>>& paragraphs) {
  data::Document d;
  d.index = 0;
  d.sentence_offsets = {0};
  d.paragraph_offsets = {0};
  for (const auto& paragraph : paragraphs) {
    for (const auto& sentence : paragraph) {
      d.tokens.insert(d.tokens.end(), sentence.begin(), sentence.end());
      d.sentence_offsets.push_back(d.num_tokens());
    }
    d.paragraph_offsets.push_back(d.num_sentences());
  }
  return d;
}

// `count` sentences of 3 to 9 distinct-ish token ids (5 .. 1004).
std::vector<std::vector<int32_t>> Sentences(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> sentences(count);
  for (auto& sentence : sentences) {
    sentence.resize(3 + rng() % 7);
    for (int32_t& token : sentence) token = static_cast<int32_t>(5 + rng() % 1000);
  }
  return sentences;
}

GruAttentionImpl& Level(SmashEncoder& encoder, const std::string& name) {
  for (const auto& child : encoder->named_children()) {
    if (child.key() == name) return *child.value()->as<GruAttentionImpl>();
  }
  throw std::runtime_error("no SMASH level " + name);
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

TEST(Smash, EachDepthIsItsOwnRnnSharingOnlyTheWordEmbeddings) {
  // The parameters that move the P, S and W parts of the document vector
  // (nonzero gradient of that part's sum) overlap only in the embeddings.
  std::vector<data::Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(data::testing::SyntheticDocument(i, 4));
  const HierarchyTensors t = Batch({&docs[0], &docs[1], &docs[2]});
  torch::manual_seed(3);
  SmashEncoder encoder(Tiny("P+S+W"));
  std::vector<std::set<std::string>> movers;
  for (int64_t part = 0; part < 3; ++part) {
    encoder->zero_grad();
    encoder(t).slice(1, 16 * part, 16 * (part + 1)).sum().backward();
    std::set<std::string> names;
    for (const auto& p : encoder->named_parameters()) {
      if (p.value().grad().defined() && p.value().grad().abs().sum().item<double>() > 0) names.insert(p.key());
    }
    movers.push_back(names);
  }
  for (int64_t a = 0; a < 3; ++a) {
    EXPECT_GE(movers[a].size(), 5u) << "depth " << a << " has its own GRU and attention";
    for (int64_t b = a + 1; b < 3; ++b) {
      std::vector<std::string> shared;
      std::set_intersection(movers[a].begin(), movers[a].end(), movers[b].begin(), movers[b].end(),
                            std::back_inserter(shared));
      EXPECT_EQ(shared, std::vector<std::string>{"embedding.weight"}) << "depths " << a << " and " << b;
    }
  }
}

TEST(Smash, SentenceDepthReadsTheDocumentsOwnSentencesOneAtATime) {
  // Twelve sentences: as 2 paragraphs of 6, and as 12 paragraphs of 1. The
  // paragraph grid (max 3 paragraphs x 4 sentences) would keep 8 and 3 of
  // them; the sentence depth reads the document's first 10 sentences either
  // way, each cut at 5 words, and equals running its word -> sentence RNN on
  // each sentence alone, then its sentence -> document RNN on the 10 vectors.
  const auto sentences = Sentences(12, 11);
  const data::Document two =
      Make({{sentences.begin(), sentences.begin() + 6}, {sentences.begin() + 6, sentences.end()}});
  std::vector<std::vector<std::vector<int32_t>>> singles;
  for (const auto& sentence : sentences) singles.push_back({sentence});
  const data::Document twelve = Make(singles);
  SmashConfig c = Tiny("S");
  c.input.max_paragraphs = 3;
  c.input.max_sentences = 4;
  c.input.max_words = 5;
  c.input.max_document_sentences = 10;
  torch::manual_seed(4);
  SmashEncoder encoder(c);
  encoder->eval();
  auto encode = [&](const std::vector<const data::Document*>& docs) {
    return encoder(ToTensors(data::BuildHierarchyBatch(docs, c.input), torch::kCPU));
  };
  const torch::Tensor batched = encode({&two, &twelve});

  torch::NoGradGuard no_grad;
  torch::Tensor table;
  for (const auto& p : encoder->named_parameters()) {
    if (p.key() == "embedding.weight") table = p.value();
  }
  std::vector<torch::Tensor> vectors;
  for (int64_t s = 0; s < 10; ++s) {
    const int64_t length = std::min<int64_t>(5, sentences[s].size());
    const torch::Tensor ids = torch::tensor(std::vector<int64_t>(sentences[s].begin(), sentences[s].begin() + length));
    vectors.push_back(
        Level(encoder, "s_word_to_sentence").forward(table.index_select(0, ids).unsqueeze(0), torch::tensor({length})));
  }
  const torch::Tensor expected =
      Level(encoder, "s_sentence_to_document").forward(torch::cat(vectors).unsqueeze(0), torch::tensor({int64_t{10}}));
  EXPECT_TRUE(torch::allclose(batched[0], expected[0], 1e-5, 1e-6)) << batched[0] << expected[0];
  EXPECT_TRUE(torch::allclose(batched[1], expected[0], 1e-5, 1e-6));
  // Sentences past the tenth, and words past the fifth, are not read.
  std::vector<std::vector<int32_t>> changed = sentences;
  changed[11][0] = 999;
  const auto long_one = std::find_if(changed.begin(), changed.begin() + 10, [](const auto& x) { return x.size() > 5; });
  ASSERT_NE(long_one, changed.begin() + 10) << "a sentence of more than 5 words among the first 10";
  (*long_one)[5] = 998;
  const data::Document later = Make({changed});
  EXPECT_TRUE(torch::allclose(encode({&later})[0], expected[0], 1e-5, 1e-6));
  changed[9][0] = changed[9][0] == 7 ? 8 : 7;
  const data::Document earlier = Make({changed});
  EXPECT_FALSE(torch::allclose(encode({&earlier})[0], expected[0], 1e-5, 1e-6));
}

TEST(Smash, TruncationComesFromTheModelConfig) {
  // Two documents differ only in each sentence's words past the third:
  // max_words 3 (and max_document_words 3) embeds them alike, the default not.
  auto sentences = Sentences(6, 12);
  for (auto& sentence : sentences) sentence.resize(6, 17);
  auto longer = sentences;
  for (auto& sentence : longer) sentence[4] = 23;
  const data::Document a = Make({{sentences.begin(), sentences.begin() + 3}, {sentences.begin() + 3, sentences.end()}});
  const data::Document b = Make({{longer.begin(), longer.begin() + 3}, {longer.begin() + 3, longer.end()}});
  for (const bool narrow : {true, false}) {
    ModelConfig config;
    config.kind = "smash";
    config.smash = Tiny("P+S+W");
    if (narrow) config.smash.input.max_words = config.smash.input.max_document_words = 3;
    torch::manual_seed(5);
    auto model = DocumentModel::Create(config);
    model->module().eval();
    const torch::Tensor vectors = model->Embed({&a, &b}, torch::kCPU);
    EXPECT_EQ(torch::allclose(vectors[0], vectors[1], 1e-6, 1e-7), narrow) << (narrow ? "max_words 3" : "default");
  }
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
  // 256-d embeddings, 128 GRU units per direction, P+S+W, 16K vocabulary,
  // a 128-unit pair hidden layer.
  SmashConfig c;
  SmashPair pair(c);
  const auto gru = [](int64_t in, int64_t u) { return 2 * (3 * u * in + 3 * u * u + 6 * u); };
  const int64_t pooling = 256 * 256 + 256 + 256;
  // Embedding + 6 GRU levels (P: 3, S: 2, W: 1; three of them read words, three
  // read 256-d vectors) + 6 poolings + head.
  const int64_t expected =
      16000 * 256 + 3 * gru(256, 128) + 3 * gru(256, 128) + 6 * pooling + (2 * 768 * 128 + 128) + (128 + 1);
  EXPECT_EQ(Count(*pair), expected);
  std::cout << "[model] SMASH P+S+W paper size: " << Count(*pair->encoder) << " encoder parameters, " << Count(*pair)
            << " with the pair head" << std::endl;
}

// Under bf16 autocast the attention GRU and its pooling stay in float32 and
// outside autocast: PyTorch's autocast wrapper of cuDNN's RNNs would run the
// GRU in fp16 without loss scaling (the GPU half of this check is in
// cuda_test.cpp). Here the CPU's autocast, under which PyTorch runs a GRU
// given bf16 in bf16, and the pooling's projection too: now the output is
// float32 and equals the fp32 forward of the rounded input.
TEST(Smash, AttentionGruRunsInFloat32UnderBf16Autocast) {
  torch::manual_seed(0);
  GruAttention gru(16, 8);
  const torch::Tensor x = torch::randn({4, 6, 16});
  const torch::Tensor lengths = torch::tensor({6, 3, 5, 1}, torch::kLong);
  const torch::Tensor fp32 = gru(x, lengths);
  // CPU bf16 autocast for a scope, turned off however the scope ends.
  struct Bf16Autocast {
    Bf16Autocast() {
      at::autocast::set_autocast_enabled(at::kCPU, true);
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    }
    ~Bf16Autocast() {
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
    }
  };
  torch::Tensor under_bf16;
  {
    const Bf16Autocast bf16;
    under_bf16 = gru(x.to(torch::kBFloat16), lengths);
  }
  EXPECT_EQ(under_bf16.scalar_type(), torch::kFloat);
  // The input is rounded to bf16 once; from there on every op is float32.
  const torch::Tensor from_rounded = gru(x.to(torch::kBFloat16).to(torch::kFloat), lengths);
  EXPECT_TRUE(torch::allclose(under_bf16, from_rounded, 1e-6, 1e-6))
      << (under_bf16 - from_rounded).abs().max().item<double>();
}

}  // namespace
}  // namespace docmatch::model
