// Model sizes from YAML (configs/models/*.yaml), one `model:` section:
//   model:
//     kind: smith          # smith | match_bert | sdr | smash | bag (model/kinds.h)
//     hidden: 256
//     ...
// Keys are the config structs' field names; an unknown key or a wrong type
// is an error naming the file and key, so a typo cannot silently train the
// default size.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/bag.h"
#include "model/match_bert.h"
#include "model/sdr.h"
#include "model/smash.h"
#include "model/smith.h"

namespace YAML {
class Node;
}

namespace docmatch::model {

struct ModelConfig {
  std::string kind;  // "smith": a row of ModelKinds() (model/kinds.h)
  SmithConfig smith;
  MatchBertConfig match_bert;
  SdrConfig sdr;
  SmashConfig smash;
  BagConfig bag;
};

ModelConfig LoadModelConfig(const std::string& path);
ModelConfig ModelConfigFromYaml(const YAML::Node& model, const std::string& origin);

// Throws std::invalid_argument naming `origin` and the key when a size
// cannot make a model (a block too short for [CLS], [SEP] and a word, no
// heads, hidden not a multiple of heads, dropout outside 0-1, ...: the kind's
// row's check, model/kinds.h), or when the kind is none of the rows. Every
// config read (YAML, a model folder's config.json) and every import passes
// through it, so no such value reaches the model.
void CheckModelConfig(const ModelConfig& config, const std::string& origin);

// The rule for every YAML file docmatch reads (model configs, --config):
// a key given twice in one map is an error naming the file, both lines and
// the section, where yaml-cpp would keep the first and drop the second.
void CheckUniqueKeys(const YAML::Node& root, const std::string& path);

// The resolved config as checkpoints and exported models carry it:
// {"kind": ..., every key of that kind}. FromJson applies the YAML checks.
nlohmann::json ModelConfigToJson(const ModelConfig& config);
ModelConfig ModelConfigFromJson(const nlohmann::json& model, const std::string& origin);

// The vocabulary size of whichever kind `config` is (set from the corpus's
// tokenizer before a model is built).
int64_t VocabSize(const ModelConfig& config);
void SetVocabSize(ModelConfig* config, int64_t vocab_size);

}  // namespace docmatch::model
