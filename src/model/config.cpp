#include "model/config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <stdexcept>

namespace docmatch::model {
namespace {

// Field setters by key, checked against the YAML node's type.
using Setters = std::map<std::string, std::function<void(const YAML::Node&)>>;

template <typename T>
std::function<void(const YAML::Node&)> Set(T* field) {
  return [field](const YAML::Node& value) { *field = value.as<T>(); };
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
      it->second(entry.second);
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

}  // namespace

ModelConfig ModelConfigFromYaml(const YAML::Node& model, const std::string& origin) {
  if (!model || !model.IsMap()) throw std::runtime_error(origin + ": expected a 'model:' map");
  ModelConfig config;
  config.kind = model["kind"] ? model["kind"].as<std::string>() : "";
  if (config.kind == "smith") {
    SmithConfig& c = config.smith;
    Apply(model,
          TransformerKeys(&c, {{"sentence_layers", Set(&c.sentence_layers)},
                               {"document_layers", Set(&c.document_layers)},
                               {"block_length", Set(&c.block_length)},
                               {"max_blocks", Set(&c.max_blocks)},
                               {"combine", Set(&c.combine)},
                               {"amplifier", Set(&c.amplifier)}}),
          origin);
  } else if (config.kind == "match_bert") {
    MatchBertConfig& c = config.match_bert;
    Apply(model,
          TransformerKeys(
              &c, {{"layers", Set(&c.layers)}, {"max_tokens", Set(&c.max_tokens)}, {"amplifier", Set(&c.amplifier)}}),
          origin);
  } else if (config.kind == "sdr") {
    SdrConfig& c = config.sdr;
    Apply(model,
          TransformerKeys(&c,
                          {{"layers", Set(&c.layers)}, {"max_tokens", Set(&c.max_tokens)}, {"margin", Set(&c.margin)}}),
          origin);
  } else if (config.kind == "smash") {
    SmashConfig& c = config.smash;
    Apply(model,
          {{"vocab_size", Set(&c.vocab_size)},
           {"embedding", Set(&c.embedding)},
           {"gru_units", Set(&c.gru_units)},
           {"depths", Set(&c.depths)},
           {"pair_hidden", Set(&c.pair_hidden)},
           {"dropout", Set(&c.dropout)}},
          origin);
  } else {
    throw std::runtime_error(origin + ": model kind '" + config.kind + "' is not one of smith, match_bert, sdr, smash");
  }
  return config;
}

ModelConfig LoadModelConfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("cannot read model config '" + path + "': " + e.what());
  }
  return ModelConfigFromYaml(root["model"], path);
}

}  // namespace docmatch::model
