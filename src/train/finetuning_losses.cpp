// The table of fine-tuning losses (finetuning_losses.h).
#include "train/finetuning_losses.h"

#include <algorithm>
#include <stdexcept>

#include "console/error.h"
#include "model/kinds.h"

namespace docmatch::train {

const std::vector<FinetuneLossInfo>& FinetuneLosses() {
  static const std::vector<FinetuneLossInfo> losses = {
      {FinetuneLoss::kContrastive, "contrastive", "ranking; the default", "top1",
       /*in_batch_negatives=*/true,
       /*needs_pair_classifier=*/false,
       /*refuses_drop_related=*/nullptr},
      {FinetuneLoss::kMultiPositive, "multipositive",
       "ranking; every labelled related document in the batch a positive", "top1",
       /*in_batch_negatives=*/true,
       /*needs_pair_classifier=*/false,
       /*refuses_drop_related=*/"counts them as positives: give one or the other"},
      {FinetuneLoss::kBce, "bce", "the papers' pair classifier", "accuracy",
       /*in_batch_negatives=*/false,
       /*needs_pair_classifier=*/true,
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
  throw Error("finetune", "--loss is " + names + ", not '" + name + "'");
}

void CheckLossTrains(const FinetuneLossInfo& loss, const std::string& kind) {
  if (!loss.needs_pair_classifier || model::FindModelKind(kind, "[finetune]").pair_classifier) return;
  throw Error("finetune", std::string("--loss ") + loss.name + " trains a pair classifier, and a " + kind +
                              " model's pair logit is a plain cosine with no scale or head of its own: " +
                              "fine-tune it with --loss contrastive, or evaluate its pre-training checkpoint");
}

}  // namespace docmatch::train
