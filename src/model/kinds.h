// The model kinds, one row each: the name a model YAML's `kind:` takes, the
// keys of its config, the checks on their values, the factory of its
// DocumentModel, and what the stages after it need to know of it (whether
// --loss bce can train its pair logit, whether it has a lower level to train
// apart, what embed advises when it reads documents in part).
//
// What a kind's Hugging Face / sentence-transformers folder holds, for
// export --format hf: the flat transformer encoder in it, named as BERT names
// its weights (io/bert_layout.h maps the names under `prefix`).
//
// Each kind defines its row in its own file, next to its module and its
// DocumentModel (model/smith.cpp: SmithKind()); ModelKinds() lists them.
// Config parsing (model/config.cpp), DocumentModel::Create, the fine-tuning
// loss table and the optimizer's levels read the rows instead of comparing
// kind names. Adding a kind: its model/<kind>.{h,cpp} with its row, its
// config struct in ModelConfig (model/config.h), its line in ModelKinds()
// (model/kinds.cpp) and model/CMakeLists.txt; DESIGN.md lists the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config_keys.h"

namespace docmatch::model {

struct ModelConfig;
class DocumentModel;

struct HfLayout {
  std::string what;    // "MatchBERT's encoder", for messages
  std::string prefix;  // the module prefix of its embeddings and layers: "encoder"
  int64_t vocab_size = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, positions = 0;
  double dropout = 0;
  bool separator = false;
  std::string pooling;                // mean | cls
  std::string dense;                  // module prefix of a dense layer after pooling, or ""
  std::string activation;             // that layer's activation (a torch class name)
  std::vector<std::string> left_out;  // module name prefixes the folder does not hold
  // The folder holds the whole model, so export writes it by default and it
  // reads back as the same kind; false where it is a part (SMITH's sentence
  // encoder: --format hf only when asked).
  bool whole_model = true;
  std::string caveat;  // what to warn of when it is written, or ""
};

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
  // Its flat encoder in BERT's layout; nullptr where it has none (a bag of
  // embeddings, SMASH's GRUs): those export in docmatch's layout alone.
  HfLayout (*hf_layout)(const ModelConfig& config);
};

// Every kind, in the order messages list them.
const std::vector<const ModelKind*>& ModelKinds();

// The row of `name`; throws std::invalid_argument, prefixed by `origin`,
// naming the kinds when there is none.
const ModelKind& FindModelKind(const std::string& name, const std::string& origin);

// "smith, match_bert, sdr, smash or bag".
std::string ModelKindNames();

}  // namespace docmatch::model
