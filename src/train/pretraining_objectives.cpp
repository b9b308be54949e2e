// The table of pre-training objectives (pretraining_objectives.h).
#include "train/pretraining_objectives.h"

#include <algorithm>
#include <stdexcept>

#include "console/error.h"

namespace docmatch::train {

const std::vector<PretrainObjectiveInfo>& PretrainObjectives() {
  static const std::vector<PretrainObjectiveInfo> objectives = {
      {PretrainObjective::kWordLm,
       "wp",
       "word LM",
       {"smith", "match_bert"},
       "'smith' or 'match_bert'",
       /*sentence_blocks=*/false,
       /*in_batch_negatives=*/false},
      {PretrainObjective::kWordAndBlocks,
       "wp+sp",
       "plus sentence blocks",
       {"smith"},
       "'smith' (sentence blocks)",
       /*sentence_blocks=*/true,
       /*in_batch_negatives=*/false},
      {PretrainObjective::kDocSplit,
       "docsplit",
       "contrastive halves",
       {"smith", "match_bert"},
       "'smith' or 'match_bert'",
       /*sentence_blocks=*/false,
       /*in_batch_negatives=*/true},
      {PretrainObjective::kSdr,
       "sdr",
       "sentences of a paragraph as positives",
       {"sdr"},
       "'sdr'",
       /*sentence_blocks=*/false,
       /*in_batch_negatives=*/false},
  };
  return objectives;
}

std::vector<std::string> PretrainObjectiveNames() {
  std::vector<std::string> names;
  for (const PretrainObjectiveInfo& o : PretrainObjectives()) names.emplace_back(o.name);
  return names;
}

std::string DescribePretrainObjectives() {
  std::string text;
  for (const PretrainObjectiveInfo& o : PretrainObjectives()) {
    if (!text.empty()) text += o.id == PretrainObjectives().back().id ? " or " : ", ";
    text += std::string(o.name) + " (" + o.trains + ": ";
    for (size_t k = 0; k < o.kinds.size(); ++k) text += (k ? ", " : "") + o.kinds[k];
    text += ")";
  }
  return text;
}

const PretrainObjectiveInfo& FindPretrainObjective(const std::string& name) {
  for (const PretrainObjectiveInfo& o : PretrainObjectives()) {
    if (name == o.name) return o;
  }
  std::string names;
  for (const std::string& n : PretrainObjectiveNames()) names += (names.empty() ? "" : ", ") + n;
  throw Error("train", "unknown objective '" + name + "' (" + names + ")");
}

void CheckObjectiveTrains(const PretrainObjectiveInfo& objective, const std::string& kind, const std::string& source) {
  if (std::find(objective.kinds.begin(), objective.kinds.end(), kind) != objective.kinds.end()) return;
  throw Error("train", std::string("objective ") + objective.name + " trains a " + objective.kinds_text + " model; " +
                           source + " is kind '" + kind + "'");
}

}  // namespace docmatch::train
