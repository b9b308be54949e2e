// The model kinds, one row each: the name a model YAML's `kind:` takes, the
// keys of its config, the checks on their values, the factory of its
// DocumentModel, and what the stages after it need to know of it (whether
// --loss bce can train its pair logit, whether it has a lower level to train
// apart, what embed advises when it reads documents in part).
//
// Each kind defines its row in its own file, next to its module and its
// DocumentModel (model/smith.cpp: SmithKind()); ModelKinds() lists them.
// Config parsing (model/config.cpp), DocumentModel::Create, the fine-tuning
// loss table and the optimizer's levels read the rows instead of comparing
// kind names. Adding a kind: its model/<kind>.{h,cpp} with its row, its
// config struct in ModelConfig (model/config.h), its line in ModelKinds()
// (model/kinds.cpp) and model/CMakeLists.txt; DESIGN.md lists the rest.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config_keys.h"

namespace docmatch::model {

struct ModelConfig;
class DocumentModel;

struct ModelKind {
  const char* name;     // "smith", as a model YAML's kind: takes it
  const char* summary;  // "hierarchical: sentence blocks, then a document transformer", for --help and messages
  // Its YAML keys bound to its fields of `config` (config.smith, ...).
  ConfigKeys (*keys)(ModelConfig& config);
  // Throws std::invalid_argument naming `origin` and the key where a value
  // cannot make a model.
  void (*check)(const ModelConfig& config, const std::string& origin);
  // A freshly initialised model (seeded by the caller).
  std::unique_ptr<DocumentModel> (*create)(const ModelConfig& config);
  // Its pair logit carries a scale or a head of its own (SMITH's amplifier,
  // SMASH's pair classifier), so a binary pair loss (--loss bce) trains it;
  // false for a plain cosine.
  bool pair_classifier;
  // Whether a parameter (its name in the module) belongs to the kind's lower
  // level, trained apart by --sentence-lr-scale and --freeze-sentence-steps;
  // nullptr where the kind has no such level.
  bool (*lower_level)(const std::string& parameter);
  // What embed suggests when documents are read only in part.
  const char* read_more;
};

// Every kind, in the order messages list them.
const std::vector<const ModelKind*>& ModelKinds();

// The row of `name`; throws std::invalid_argument, prefixed by `origin`,
// naming the kinds when there is none.
const ModelKind& FindModelKind(const std::string& name, const std::string& origin);

// "smith, match_bert, sdr, smash or bag".
std::string ModelKindNames();

}  // namespace docmatch::model
