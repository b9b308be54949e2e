// The fine-tuning losses, one entry each: the name --loss takes, what it
// teaches, whether it needs a pair classifier (model/kinds.h: a kind whose
// pair logit has a scale or head of its own), whether it scores in-batch negatives
// (then it draws the related pairs alone, and the temperature, hard and
// mined negatives and --grad-cache apply to it), and whether it takes
// --drop-related.
// `finetune`'s allowed values, its help and the stage's checks read this
// table; adding a loss starts with an entry here and its PairLoss
// (finetune.cpp).
#pragma once

#include <string>
#include <vector>

namespace docmatch::train {

enum class FinetuneLoss {
  kContrastive,    // symmetric InfoNCE of related pairs against the global batch (objectives.h, Contrastive)
  kMultiPositive,  // the same, every labelled related candidate a positive (objectives.h, MultiPositiveContrastive)
  kBce,            // sigmoid cross-entropy of each labelled pair's logit (objectives.h, Siamese)
};

struct FinetuneLossInfo {
  FinetuneLoss id;
  const char* name;                  // "contrastive", as --loss takes it
  const char* teaches;               // "ranking; the default", for --help
  const char* headline;              // the training and validation figure beside the loss: "top1"
  bool in_batch_negatives;           // scores related pairs against the batch's other documents
  bool needs_pair_classifier;        // trains only kinds whose row has pair_classifier (model/kinds.h)
  const char* refuses_drop_related;  // why --drop-related cannot apply to it; nullptr: it takes it
};

// Every loss, in the order --help lists them (the default first).
const std::vector<FinetuneLossInfo>& FinetuneLosses();

// The names --loss accepts.
std::vector<std::string> FinetuneLossNames();

// --loss's help: "contrastive (ranking; the default) or bce (...)".
std::string DescribeFinetuneLosses();

// The entry of `name`; throws std::invalid_argument naming the losses when
// there is none.
const FinetuneLossInfo& FindFinetuneLoss(const std::string& name);

// Throws std::invalid_argument, prefixed "[finetune]", when `loss` does not
// train a model of `kind` (a row of model::ModelKinds()), saying which loss does.
void CheckLossTrains(const FinetuneLossInfo& loss, const std::string& kind);

}  // namespace docmatch::train
