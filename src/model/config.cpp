// Parsing a model YAML into each kind's config struct, unknown keys refused
// (config.h).
#include "model/config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
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

}  // namespace

ModelConfig ModelConfigFromYaml(const YAML::Node& model, const std::string& origin) {
  if (!model || !model.IsMap()) throw std::runtime_error(origin + ": expected a 'model:' map");
  ModelConfig config;
  config.kind = model["kind"] ? model["kind"].as<std::string>() : "";
  Apply(model, Fields(config, origin), origin);
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
