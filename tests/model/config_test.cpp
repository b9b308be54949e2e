// Model YAML: the shipped configs load, and typos are errors.
#include "model/config.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

namespace docmatch::model {
namespace {

TEST(ModelConfig, ShippedPaperConfigsHaveThePapersSizes) {
  const ModelConfig smith = LoadModelConfig(std::string(DOCMATCH_SOURCE_DIR) + "/configs/models/smith-paper.yaml");
  EXPECT_EQ(smith.kind, "smith");
  EXPECT_EQ(smith.smith.sentence_layers, 6);
  EXPECT_EQ(smith.smith.document_layers, 3);
  EXPECT_EQ(smith.smith.hidden, 256);
  EXPECT_EQ(smith.smith.heads, 4);
  EXPECT_EQ(smith.smith.block_length, 32);
  EXPECT_EQ(smith.smith.max_blocks, 48);
  const ModelConfig flat = LoadModelConfig(std::string(DOCMATCH_SOURCE_DIR) + "/configs/models/match-bert-paper.yaml");
  EXPECT_EQ(flat.kind, "match_bert");
  EXPECT_EQ(flat.match_bert.max_tokens, 256);
  const ModelConfig smash = LoadModelConfig(std::string(DOCMATCH_SOURCE_DIR) + "/configs/models/smash-paper.yaml");
  EXPECT_EQ(smash.smash.embedding, 256);
  EXPECT_EQ(smash.smash.gru_units, 128);
  EXPECT_EQ(smash.smash.depths, "P+S+W");
  EXPECT_EQ(smash.smash.pair_hidden, 128);  // the paper's pair hidden layer
  EXPECT_EQ(smash.smash.input.max_document_sentences, 64);
  // The truncation keys reach the batch options, and round-trip through JSON
  // (a checkpoint's config) unchanged.
  const ModelConfig narrow = ModelConfigFromYaml(
      YAML::Load("{kind: smash, max_paragraphs: 3, max_sentences: 4, max_words: 5, max_document_sentences: 6, "
                 "max_document_words: 7}"),
      "test");
  const data::HierarchyOptions& input = narrow.smash.input;
  EXPECT_EQ(std::vector<int64_t>({input.max_paragraphs, input.max_sentences, input.max_words,
                                  input.max_document_sentences, input.max_document_words}),
            std::vector<int64_t>({3, 4, 5, 6, 7}));
  EXPECT_EQ(ModelConfigFromJson(ModelConfigToJson(narrow), "json").smash.input.max_document_sentences, 6);
  EXPECT_EQ(LoadModelConfig(std::string(DOCMATCH_SOURCE_DIR) + "/configs/models/han.yaml").smash.depths, "S");
  EXPECT_EQ(LoadModelConfig(std::string(DOCMATCH_SOURCE_DIR) + "/configs/models/sdr-paper.yaml").sdr.margin, 1.0);
  for (const char* tiny : {"smith-tiny.yaml", "match-bert-tiny.yaml", "sdr-tiny.yaml", "smash-tiny.yaml"}) {
    EXPECT_NO_THROW(LoadModelConfig(std::string(DOCMATCH_SOURCE_DIR) + "/configs/models/" + tiny)) << tiny;
  }
}

// The error reading `yaml` as test.yaml gives, or "" when it reads.
std::string ErrorOf(const std::string& yaml) {
  try {
    ModelConfigFromYaml(YAML::Load(yaml)["model"], "test.yaml");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, UnknownKeysWrongTypesAndKindsAreErrors) {
  const auto error = ErrorOf;
  EXPECT_NE(error("model: {kind: smith, hiden: 64}").find("unknown model key 'hiden'"), std::string::npos);
  EXPECT_NE(error("model: {kind: smith, hidden: big}").find("'hidden'"), std::string::npos);
  EXPECT_NE(error("model: {kind: bert}").find("not one of"), std::string::npos);
  EXPECT_EQ(error("model: {kind: smith, hidden: 64, combine: attention}"), "");
}

TEST(ModelConfig, SizesThatCannotMakeAModelAreErrorsNamingTheKey) {
  const auto error = ErrorOf;
  const auto names = [&](const std::string& yaml, const std::string& key) {
    return error(yaml).find("test.yaml: model key '" + key + "'") != std::string::npos;
  };
  // A block holds [CLS], [SEP] and a word: 3 tokens at least, 2 without [SEP].
  EXPECT_TRUE(names("model: {kind: smith, block_length: 2}", "block_length"));
  EXPECT_EQ(error("model: {kind: smith, block_length: 3}"), "");
  EXPECT_EQ(error("model: {kind: smith, block_length: 2, separator: false}"), "");
  EXPECT_TRUE(names("model: {kind: smith, block_length: 0}", "block_length"));
  EXPECT_TRUE(names("model: {kind: smith, max_blocks: 0}", "max_blocks"));
  EXPECT_TRUE(names("model: {kind: smith, hidden: 66, heads: 4}", "hidden"));
  EXPECT_TRUE(names("model: {kind: smith, dropout: 1.5}", "dropout"));
  EXPECT_TRUE(names("model: {kind: smith, dropout: .nan}", "dropout"));
  EXPECT_TRUE(names("model: {kind: match_bert, max_tokens: 1}", "max_tokens"));
  EXPECT_TRUE(names("model: {kind: match_bert, max_tokens: 2, separator: true}", "max_tokens"));
  EXPECT_EQ(error("model: {kind: match_bert, max_tokens: 2}"), "");
  EXPECT_TRUE(names("model: {kind: match_bert, chunks: 0}", "chunks"));
  EXPECT_TRUE(names("model: {kind: sdr, max_tokens: 2, separator: true}", "max_tokens"));
  EXPECT_TRUE(names("model: {kind: sdr, max_tokens: 0}", "max_tokens"));
  EXPECT_TRUE(names("model: {kind: smash, max_words: 0}", "max_words"));
  // A model folder's config.json passes the same checks.
  EXPECT_THROW(ModelConfigFromJson(nlohmann::json{{"kind", "smith"}, {"block_length", 1}}, "config.json"),
               std::invalid_argument);
}

}  // namespace
}  // namespace docmatch::model
