// Parsing a model YAML into each kind's config struct, unknown keys refused
// (config.h).
#include "model/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

namespace docmatch::model {
namespace {

// Each key's setter (checked against the YAML node's type) and getter.
struct Field {
  std::function<void(const YAML::Node&)> set;
  std::function<nlohmann::json()> get;
};
using Setters = std::map<std::string, Field>;

template <typename T>
Field Set(T* field) {
  return {[field](const YAML::Node& value) { *field = value.as<T>(); }, [field] { return nlohmann::json(*field); }};
}

void Apply(const YAML::Node& model, const Setters& setters, const std::string& origin) {
  for (const auto& entry : model) {
    const std::string key = entry.first.as<std::string>();
    if (key == "kind") continue;
    const auto it = setters.find(key);
    if (it == setters.end()) {
      std::string known;
      for (const auto& [name, _] : setters) known += (known.empty() ? "" : ", ") + name;
      throw std::runtime_error(origin + ": unknown model key '" + key + "' (known: " + known + ")");
    }
    try {
      it->second.set(entry.second);
    } catch (const YAML::Exception& e) {
      throw std::runtime_error(origin + ": model key '" + key + "': " + e.what());
    }
  }
}

// The keys every transformer config shares, plus the kind's own.
template <typename Config>
Setters TransformerKeys(Config* c, Setters own) {
  own.insert({{"vocab_size", Set(&c->vocab_size)},
              {"hidden", Set(&c->hidden)},
              {"heads", Set(&c->heads)},
              {"intermediate", Set(&c->intermediate)},
              {"dropout", Set(&c->dropout)}});
  return own;
}

// The keys of `config.kind`, bound to `config`'s fields.
Setters Fields(ModelConfig& config, const std::string& origin) {
  if (config.kind == "smith") {
    SmithConfig& c = config.smith;
    return TransformerKeys(&c, {{"sentence_layers", Set(&c.sentence_layers)},
                                {"document_layers", Set(&c.document_layers)},
                                {"block_length", Set(&c.block_length)},
                                {"max_blocks", Set(&c.max_blocks)},
                                {"combine", Set(&c.combine)},
                                {"block_pooling", Set(&c.block_pooling)},
                                {"separator", Set(&c.separator)},
                                {"amplifier", Set(&c.amplifier)}});
  }
  if (config.kind == "match_bert") {
    MatchBertConfig& c = config.match_bert;
    return TransformerKeys(&c, {{"layers", Set(&c.layers)},
                                {"max_tokens", Set(&c.max_tokens)},
                                {"amplifier", Set(&c.amplifier)},
                                {"pooling", Set(&c.pooling)},
                                {"separator", Set(&c.separator)},
                                {"chunks", Set(&c.chunks)},
                                {"window_pooling", Set(&c.window_pooling)}});
  }
  if (config.kind == "sdr") {
    SdrConfig& c = config.sdr;
    return TransformerKeys(&c, {{"layers", Set(&c.layers)},
                                {"max_tokens", Set(&c.max_tokens)},
                                {"margin", Set(&c.margin)},
                                {"separator", Set(&c.separator)}});
  }
  if (config.kind == "smash") {
    SmashConfig& c = config.smash;
    return {{"vocab_size", Set(&c.vocab_size)},
            {"embedding", Set(&c.embedding)},
            {"gru_units", Set(&c.gru_units)},
            {"depths", Set(&c.depths)},
            {"pair_hidden", Set(&c.pair_hidden)},
            {"dropout", Set(&c.dropout)},
            {"max_paragraphs", Set(&c.input.max_paragraphs)},
            {"max_sentences", Set(&c.input.max_sentences)},
            {"max_words", Set(&c.input.max_words)},
            {"max_document_sentences", Set(&c.input.max_document_sentences)},
            {"max_document_words", Set(&c.input.max_document_words)}};
  }
  throw std::runtime_error(origin + ": model kind '" + config.kind + "' is not one of smith, match_bert, sdr, smash");
}

// Throws naming `key` unless `value` is a number from low to high (no upper
// bound where high is infinite; `why` then says what the least is for).
void Between(const std::string& origin, const char* key, double value, double low,
             double high = std::numeric_limits<double>::infinity(), const char* why = nullptr) {
  if (std::isfinite(value) && value >= low && value <= high) return;
  std::ostringstream text;
  text << origin << ": model key '" << key << "' is " << value << "; it must be ";
  if (std::isinf(high)) {
    text << "at least " << low << " (" << why << ")";
  } else {
    text << "from " << low << " to " << high;
  }
  throw std::invalid_argument(text.str());
}

void AtLeast(const std::string& origin, const char* key, double value, double low, const char* why) {
  Between(origin, key, value, low, std::numeric_limits<double>::infinity(), why);
}

// The sizes every transformer config shares.
template <typename Config>
void CheckTransformer(const Config& c, const std::string& origin) {
  AtLeast(origin, "hidden", c.hidden, 1, "channels");
  AtLeast(origin, "heads", c.heads, 1, "attention heads");
  if (c.hidden % c.heads != 0) {
    throw std::invalid_argument(origin + ": model key 'hidden' (" + std::to_string(c.hidden) +
                                ") must be a multiple of 'heads' (" + std::to_string(c.heads) + ")");
  }
  AtLeast(origin, "intermediate", c.intermediate, 1, "feed-forward width");
  Between(origin, "dropout", c.dropout, 0, 1);
}

}  // namespace

void CheckModelConfig(const ModelConfig& config, const std::string& origin) {
  if (config.kind == "smith") {
    const SmithConfig& c = config.smith;
    CheckTransformer(c, origin);
    AtLeast(origin, "sentence_layers", c.sentence_layers, 1, "the sentence-block encoder");
    AtLeast(origin, "document_layers", c.document_layers, 0, "layers");
    AtLeast(origin, "block_length", c.block_length, c.separator ? 3 : 2,
            c.separator ? "a block holds [CLS], [SEP] and a word" : "a block holds [CLS] and a word");
    AtLeast(origin, "max_blocks", c.max_blocks, 1, "blocks a document");
    AtLeast(origin, "amplifier", c.amplifier, 0, "the pair logit's scale");
  } else if (config.kind == "match_bert") {
    const MatchBertConfig& c = config.match_bert;
    CheckTransformer(c, origin);
    AtLeast(origin, "layers", c.layers, 1, "layers");
    AtLeast(origin, "max_tokens", c.max_tokens, c.separator ? 3 : 2,
            c.separator ? "a window holds [CLS], [SEP] and a word" : "a window holds [CLS] and a word");
    AtLeast(origin, "chunks", c.chunks, 1, "windows a document");
    AtLeast(origin, "amplifier", c.amplifier, 0, "the pair logit's scale");
  } else if (config.kind == "sdr") {
    const SdrConfig& c = config.sdr;
    CheckTransformer(c, origin);
    AtLeast(origin, "layers", c.layers, 1, "layers");
    AtLeast(origin, "max_tokens", c.max_tokens, c.separator ? 3 : 1,
            c.separator ? "a sentence holds [CLS], [SEP] and a word" : "a sentence holds a word");
    Between(origin, "margin", c.margin, 0, 2);
  } else if (config.kind == "smash") {
    const SmashConfig& c = config.smash;
    AtLeast(origin, "embedding", c.embedding, 1, "word vector size");
    AtLeast(origin, "gru_units", c.gru_units, 1, "GRU width");
    AtLeast(origin, "pair_hidden", c.pair_hidden, 1, "the pair head's width");
    Between(origin, "dropout", c.dropout, 0, 1);
    AtLeast(origin, "max_paragraphs", c.input.max_paragraphs, 1, "paragraphs a document");
    AtLeast(origin, "max_sentences", c.input.max_sentences, 1, "sentences a paragraph");
    AtLeast(origin, "max_words", c.input.max_words, 1, "words a sentence");
    AtLeast(origin, "max_document_sentences", c.input.max_document_sentences, 1, "sentences a document");
    AtLeast(origin, "max_document_words", c.input.max_document_words, 1, "words a document");
  }
}

ModelConfig ModelConfigFromYaml(const YAML::Node& model, const std::string& origin) {
  if (!model || !model.IsMap()) throw std::runtime_error(origin + ": expected a 'model:' map");
  ModelConfig config;
  config.kind = model["kind"] ? model["kind"].as<std::string>() : "";
  Apply(model, Fields(config, origin), origin);
  CheckModelConfig(config, origin);
  return config;
}

nlohmann::json ModelConfigToJson(const ModelConfig& config) {
  ModelConfig copy = config;
  nlohmann::json json = {{"kind", config.kind}};
  for (const auto& [key, field] : Fields(copy, "model config")) json[key] = field.get();
  return json;
}

ModelConfig ModelConfigFromJson(const nlohmann::json& model, const std::string& origin) {
  // JSON is YAML's flow syntax: one parser, one set of checks.
  return ModelConfigFromYaml(YAML::Load(model.dump()), origin);
}

int64_t VocabSize(const ModelConfig& config) {
  ModelConfig copy = config;
  return Fields(copy, "model config").at("vocab_size").get().get<int64_t>();
}

void SetVocabSize(ModelConfig* config, int64_t vocab_size) {
  Fields(*config, "model config").at("vocab_size").set(YAML::Node(vocab_size));
}

void CheckUniqueKeys(const YAML::Node& root, const std::string& path) {
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& node,
                                                                        const std::string& section) {
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) walk(item, section);
      return;
    }
    if (!node.IsMap()) return;
    std::map<std::string, int> lines;
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      const int line = entry.first.Mark().line + 1;
      const auto [first, added] = lines.emplace(key, line);
      if (!added) {
        throw std::runtime_error(path + ":" + std::to_string(line) + ": key '" + key + "' is given twice" +
                                 (section.empty() ? std::string() : " in '" + section + "'") + " (first on line " +
                                 std::to_string(first->second) + "); only one can hold");
      }
      walk(entry.second, section.empty() ? key : section + "." + key);
    }
  };
  walk(root, "");
}

ModelConfig LoadModelConfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("cannot read model config '" + path + "': " + e.what());
  }
  CheckUniqueKeys(root, path);
  if (!root.IsMap() || !root["model"] || !root["model"].IsMap()) {
    throw std::runtime_error("'" + path + "' is not a model config: expected a YAML file with a `model:` section " +
                             "(kind and sizes; configs/models/ has one per kind)");
  }
  return ModelConfigFromYaml(root["model"], path);
}

}  // namespace docmatch::model
