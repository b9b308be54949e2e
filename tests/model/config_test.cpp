// Model YAML: the shipped configs load, and typos are errors.
#include "model/config.h"

#include <set>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "model/document_model.h"
#include "model/kinds.h"

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
  for (const char* tiny : {"smith-tiny.yaml", "match-bert-tiny.yaml", "sdr-tiny.yaml", "smash-tiny.yaml", "bag.yaml"}) {
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
  EXPECT_NE(error("model: {kind: bert}").find("not one of smith, match_bert, sdr, smash or bag"), std::string::npos);
  EXPECT_NE(error("model: {kind: bag, layers: 2}")
                .find("unknown model key 'layers' (known: amplifier, hidden, "
                      "max_tokens, vocab_size)"),
            std::string::npos);
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

// The kind registry: every row is complete and named once, its keys bind
// fields that round-trip, its check refuses a size of zero, and its factory
// makes a model of its own kind.
TEST(ModelKinds, EveryRowParsesChecksAndCreatesItsKind) {
  std::set<std::string> names;
  for (const ModelKind* kind : ModelKinds()) {
    SCOPED_TRACE(kind->name);
    EXPECT_TRUE(names.insert(kind->name).second);
    ASSERT_TRUE(kind->keys && kind->check && kind->create && kind->summary && kind->read_more);
    EXPECT_EQ(&FindModelKind(kind->name, "test"), kind);
    ModelConfig config;
    config.kind = kind->name;
    ConfigKeys keys = kind->keys(config);
    ASSERT_TRUE(keys.count("vocab_size"));
    keys.at("vocab_size").set(YAML::Node(321));
    EXPECT_EQ(VocabSize(config), 321);  // the key is bound to the config's own field
    EXPECT_NO_THROW(kind->check(config, "test"));
    // Every kind has a size that cannot be zero; the check names it.
    bool refused = false;
    for (auto& [key, field] : kind->keys(config)) {
      ModelConfig zero = config;
      try {
        kind->keys(zero).at(key).set(YAML::Node(0));
      } catch (const YAML::Exception&) {
        continue;  // not a number (separator: a bool)
      }
      try {
        kind->check(zero, "test");
      } catch (const std::invalid_argument& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("model key '" + key + "'"), std::string::npos) << e.what();
      }
    }
    EXPECT_TRUE(refused);
    config.kind = kind->name;
    SetVocabSize(&config, 50);
    EXPECT_EQ(DocumentModel::Create(config)->config().kind, kind->name);
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_THROW(FindModelKind("bert", "test"), std::invalid_argument);
  // Only SMITH has a lower level to train apart; SDR's plain cosine has no
  // pair classifier for --loss bce.
  EXPECT_TRUE(FindModelKind("smith", "t").lower_level("sentence_encoder.layers.0.output.weight"));
  EXPECT_FALSE(FindModelKind("smith", "t").lower_level("document_encoder.layers.0.output.weight"));
  EXPECT_EQ(FindModelKind("bag", "t").lower_level, nullptr);
  EXPECT_FALSE(FindModelKind("sdr", "t").pair_classifier);
  EXPECT_TRUE(FindModelKind("bag", "t").pair_classifier);
}

}  // namespace
}  // namespace docmatch::model
