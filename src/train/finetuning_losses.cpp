// The table of fine-tuning losses (finetuning_losses.h).
#include "train/finetuning_losses.h"

#include <algorithm>
#include <stdexcept>

namespace docmatch::train {

const std::vector<FinetuneLossInfo>& FinetuneLosses() {
  static const std::vector<FinetuneLossInfo> losses = {
      {FinetuneLoss::kContrastive,
       "contrastive",
       "ranking; the default",
       "top1",
       /*in_batch_negatives=*/true,
       {"smith", "match_bert", "sdr", "smash"},
       /*other_kinds_advice=*/"",
       /*refuses_drop_related=*/nullptr},
      {FinetuneLoss::kMultiPositive,
       "multipositive",
       "ranking; every labelled related document in the batch a positive",
       "top1",
       /*in_batch_negatives=*/true,
       {"smith", "match_bert", "sdr", "smash"},
       /*other_kinds_advice=*/"",
       /*refuses_drop_related=*/"counts them as positives: give one or the other"},
      {FinetuneLoss::kBce,
       "bce",
       "the papers' pair classifier",
       "accuracy",
       /*in_batch_negatives=*/false,
       {"smith", "match_bert", "smash"},
       "SDR has no pair head for --loss bce; fine-tune it with --loss contrastive (its mean sentence vector) or "
       "evaluate its pre-training checkpoint",
       /*refuses_drop_related=*/"has no in-batch negatives"},
  };
  return losses;
}

std::vector<std::string> FinetuneLossNames() {
  std::vector<std::string> names;
  for (const FinetuneLossInfo& l : FinetuneLosses()) names.emplace_back(l.name);
  return names;
}

std::string DescribeFinetuneLosses() {
  std::string text;
  const std::vector<FinetuneLossInfo>& losses = FinetuneLosses();
  for (size_t i = 0; i < losses.size(); ++i) {
    if (i > 0) text += i + 1 == losses.size() ? " or " : ", ";
    text += std::string(losses[i].name) + " (" + losses[i].teaches + ")";
  }
  return text;
}

const FinetuneLossInfo& FindFinetuneLoss(const std::string& name) {
  for (const FinetuneLossInfo& l : FinetuneLosses()) {
    if (name == l.name) return l;
  }
  std::string names;
  for (const std::string& n : FinetuneLossNames()) names += (names.empty() ? "" : " or ") + n;
  throw std::invalid_argument("[finetune] --loss is " + names + ", not '" + name + "'");
}

void CheckLossTrains(const FinetuneLossInfo& loss, const std::string& kind) {
  if (std::find(loss.kinds.begin(), loss.kinds.end(), kind) != loss.kinds.end()) return;
  throw std::invalid_argument(std::string("[finetune] ") + loss.other_kinds_advice);
}

}  // namespace docmatch::train
