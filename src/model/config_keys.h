// What a model kind's row (model/kinds.h) is made of on the config side: its
// YAML keys bound to the fields of its config struct, and the checks that a
// value can make a model. Each kind's file builds its keys and its check from
// these, so that every kind parses and refuses the same way: an unknown key
// names the known ones, a wrong type names the key, and a size that cannot
// make a model names the key, its value and the least it may be.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <limits>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace docmatch::model {

// One key: its setter (checked against the YAML node's type) and its getter.
struct ConfigKey {
  std::function<void(const YAML::Node&)> set;
  std::function<nlohmann::json()> get;
};
using ConfigKeys = std::map<std::string, ConfigKey>;  // key -> its field

// The key bound to `field` (a config struct's member).
template <typename T>
ConfigKey Key(T* field) {
  return {[field](const YAML::Node& value) { *field = value.as<T>(); }, [field] { return nlohmann::json(*field); }};
}

// The keys every transformer config shares (vocab_size, hidden, heads,
// intermediate, dropout), plus the kind's `own`.
template <typename Config>
ConfigKeys TransformerKeys(Config* c, ConfigKeys own) {
  own.insert({{"vocab_size", Key(&c->vocab_size)},
              {"hidden", Key(&c->hidden)},
              {"heads", Key(&c->heads)},
              {"intermediate", Key(&c->intermediate)},
              {"dropout", Key(&c->dropout)}});
  return own;
}

// Throws std::invalid_argument naming `origin` and `key` unless `value` is a
// finite number from `low` to `high`.
void KeyBetween(const std::string& origin, const char* key, double value, double low, double high);
// The same with no upper bound; `why` says what the least is for ("a block
// holds [CLS] and a word").
void KeyAtLeast(const std::string& origin, const char* key, double value, double low, const char* why);

// The sizes every transformer config shares: hidden a multiple of heads,
// dropout from 0 to 1, ...
template <typename Config>
void CheckTransformerKeys(const Config& c, const std::string& origin) {
  KeyAtLeast(origin, "hidden", c.hidden, 1, "channels");
  KeyAtLeast(origin, "heads", c.heads, 1, "attention heads");
  if (c.hidden % c.heads != 0) {
    throw std::invalid_argument(origin + ": model key 'hidden' (" + std::to_string(c.hidden) +
                                ") must be a multiple of 'heads' (" + std::to_string(c.heads) + ")");
  }
  KeyAtLeast(origin, "intermediate", c.intermediate, 1, "feed-forward width");
  KeyBetween(origin, "dropout", c.dropout, 0, 1);
}

}  // namespace docmatch::model
