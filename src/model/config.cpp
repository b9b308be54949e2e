// Parsing a model YAML into each kind's config struct, unknown keys refused
// (config.h).
#include "model/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

#include "model/kinds.h"

namespace docmatch::model {
namespace {

void Apply(const YAML::Node& model, const ConfigKeys& keys, const std::string& origin) {
  for (const auto& entry : model) {
    const std::string key = entry.first.as<std::string>();
    if (key == "kind") continue;
    const auto it = keys.find(key);
    if (it == keys.end()) {
      std::string known;
      for (const auto& [name, _] : keys) known += (known.empty() ? "" : ", ") + name;
      throw std::runtime_error(origin + ": unknown model key '" + key + "' (known: " + known + ")");
    }
    try {
      it->second.set(entry.second);
    } catch (const YAML::Exception& e) {
      throw std::runtime_error(origin + ": model key '" + key + "': " + e.what());
    }
  }
}

// The keys of `config.kind`, bound to `config`'s fields.
ConfigKeys Fields(ModelConfig& config, const std::string& origin) {
  return FindModelKind(config.kind, origin).keys(config);
}

}  // namespace

void KeyBetween(const std::string& origin, const char* key, double value, double low, double high) {
  if (std::isfinite(value) && value >= low && value <= high) return;
  std::ostringstream text;
  text << origin << ": model key '" << key << "' is " << value << "; it must be from " << low << " to " << high;
  throw std::invalid_argument(text.str());
}

void KeyAtLeast(const std::string& origin, const char* key, double value, double low, const char* why) {
  if (std::isfinite(value) && value >= low) return;
  std::ostringstream text;
  text << origin << ": model key '" << key << "' is " << value << "; it must be at least " << low << " (" << why << ")";
  throw std::invalid_argument(text.str());
}

void CheckModelConfig(const ModelConfig& config, const std::string& origin) {
  FindModelKind(config.kind, origin).check(config, origin);
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
