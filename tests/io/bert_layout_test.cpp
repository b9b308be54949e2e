// The BERT <-> docmatch name table: every tensor of a MatchBERT encoder has a
// BERT name that maps back to it, the BERT names are the ones transformers'
// BertModel uses (spelled out here by hand), and a state dict converts with
// positions summed with token type 0.
#include "io/bert_layout.h"

#include <gtest/gtest.h>

#include <set>

#include "model/match_bert.h"

namespace docmatch::io {
namespace {

TEST(BertLayout, EveryEncoderTensorRoundTripsThroughItsBertName) {
  model::MatchBertConfig config;
  config.vocab_size = 40, config.hidden = 8, config.heads = 2, config.intermediate = 16, config.layers = 2;
  config.max_tokens = 12;
  model::FlatEncoder encoder(config);
  std::set<std::string> bert_names;
  for (const auto& p : encoder->named_parameters(true)) {
    if (p.key().rfind("dense.", 0) == 0) {  // [CLS] pooling's head: sentence-transformers' Dense module
      EXPECT_EQ(BertName(p.key(), "encoder"), "") << p.key();
      continue;
    }
    const std::string bert = BertName(p.key(), "encoder");
    ASSERT_FALSE(bert.empty()) << p.key();
    bert_names.insert(bert);
    if (bert != "embeddings.position_embeddings.weight") EXPECT_EQ(DocmatchName(bert, "encoder"), p.key());
  }
  const std::set<std::string> expected_layer = {"attention.self.query.weight",
                                                "attention.self.query.bias",
                                                "attention.self.key.weight",
                                                "attention.self.key.bias",
                                                "attention.self.value.weight",
                                                "attention.self.value.bias",
                                                "attention.output.dense.weight",
                                                "attention.output.dense.bias",
                                                "attention.output.LayerNorm.weight",
                                                "attention.output.LayerNorm.bias",
                                                "intermediate.dense.weight",
                                                "intermediate.dense.bias",
                                                "output.dense.weight",
                                                "output.dense.bias",
                                                "output.LayerNorm.weight",
                                                "output.LayerNorm.bias"};
  std::set<std::string> expected = {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                                    "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"};
  for (int layer = 0; layer < 2; ++layer)
    for (const std::string& name : expected_layer)
      expected.insert("encoder.layer." + std::to_string(layer) + "." + name);
  EXPECT_EQ(bert_names, expected);
  EXPECT_EQ(DocmatchName("encoder.layer.1.output.LayerNorm.gamma", "sentence_encoder"),
            "sentence_encoder.layers.1.output_norm.weight");
  EXPECT_EQ(DocmatchName("pooler.dense.weight", "encoder"), "");
}

TEST(BertLayout, StateDictConvertsWithPositionsPlusTokenTypeZero) {
  const torch::Tensor positions = torch::arange(20, torch::kFloat).view({5, 4});
  const torch::Tensor types = torch::full({2, 4}, 0.5);
  std::vector<std::string> dropped;
  const auto out = BertToDocmatch({{"embeddings.position_embeddings.weight", positions},
                                   {"embeddings.token_type_embeddings.weight", types},
                                   {"embeddings.word_embeddings.weight", torch::ones({7, 4})},
                                   {"pooler.dense.bias", torch::zeros({4})}},
                                  "encoder", 3, "test", &dropped);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(torch::equal(out.at("embeddings.positions.weight"), positions.slice(0, 0, 3) + 0.5));
  EXPECT_TRUE(torch::equal(out.at("embeddings.tokens.weight"), torch::ones({7, 4})));
  EXPECT_EQ(dropped, std::vector<std::string>{"pooler.dense.bias"});
  EXPECT_THROW(BertToDocmatch({{"embeddings.word_embeddings.weight", torch::ones({7, 4})}}, "encoder", 3, "x"),
               std::runtime_error);
}

}  // namespace
}  // namespace docmatch::io
