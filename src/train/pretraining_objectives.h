// The pre-training objectives, one entry each: the name --objective takes,
// what it trains, the model kinds it trains, and the options that apply to it.
// `pretrain`'s allowed values, its help and the trainer's checks all read
// this table; adding an objective starts with an entry here.
#pragma once

#include <string>
#include <vector>

namespace docmatch::train {

enum class PretrainObjective {
  kWordLm,         // wp: masked word LM
  kWordAndBlocks,  // wp+sp: masked word LM + masked sentence-block prediction (SMITH)
  kDocSplit,       // docsplit: the two halves of a document as positives (InfoNCE), + word LM
  kSdr,            // sdr: SDR's word LM + sentence contrastive
};

struct PretrainObjectiveInfo {
  PretrainObjective id;
  const char* name;                // "wp+sp", as --objective takes it
  const char* trains;              // "plus sentence blocks", for --help
  std::vector<std::string> kinds;  // the model kinds it trains, {"smith"}
  const char* kinds_text;          // the same for a message: "'smith' (sentence blocks)"
  bool sentence_blocks;            // masks sentence blocks: --detach-block-targets applies
  bool in_batch_negatives;         // its batch is one loss: --grad-cache applies
};

// Every objective, in the order --help lists them.
const std::vector<PretrainObjectiveInfo>& PretrainObjectives();

// The names --objective accepts.
std::vector<std::string> PretrainObjectiveNames();

// --objective's help: "wp (word LM: smith, match_bert), ...".
std::string DescribePretrainObjectives();

// The entry of `name`; throws std::invalid_argument naming the objectives
// when there is none.
const PretrainObjectiveInfo& FindPretrainObjective(const std::string& name);

// Throws std::invalid_argument, prefixed "[train]", when `objective` does not
// train a model of `kind` (read from `source`, a model YAML or folder).
void CheckObjectiveTrains(const PretrainObjectiveInfo& objective, const std::string& kind, const std::string& source);

}  // namespace docmatch::train
