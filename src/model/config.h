// Model sizes from YAML (configs/models/*.yaml), one `model:` section:
//   model:
//     kind: smith          # smith | match_bert
//     hidden: 256
//     ...
// Keys are the config structs' field names; an unknown key or a wrong type
// is an error naming the file and key, so a typo cannot silently train the
// default size.
#pragma once

#include <string>

#include "model/match_bert.h"
#include "model/smith.h"

namespace YAML {
class Node;
}

namespace docmatch::model {

struct ModelConfig {
  std::string kind;  // "smith" or "match_bert"
  SmithConfig smith;
  MatchBertConfig match_bert;
};

ModelConfig LoadModelConfig(const std::string& path);
ModelConfig ModelConfigFromYaml(const YAML::Node& model, const std::string& origin);

}  // namespace docmatch::model
