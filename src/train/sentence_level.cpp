// SMITH's two levels apart (sentence_level.h).
#include "train/sentence_level.h"

#include <stdexcept>

#include "console/error.h"
#include "model/kinds.h"
#include "train/training_run.h"

namespace docmatch::train {

SentenceLevel::SentenceLevel(const LoopOptions& options, const std::string& kind, const std::string& stage)
    : scale_(options.sentence_lr_scale),
      freeze_steps_(options.freeze_sentence_steps),
      apart_(options.sentence_lr_scale != 1.0 || options.freeze_sentence_steps > 0) {
  if (const nlohmann::json trainer = options.resume ? TrainingRun::LatestTrainerState(options.run) : nullptr;
      trainer.is_object()) {
    const bool had = trainer.value("sentence_level_groups", false);
    DOCMATCH_CHECK(had || !apart_, stage, options.run,
                   " was trained with one learning rate for the whole model: resume without --sentence-lr-scale and "
                   "--freeze-sentence-steps, or start over with --fresh");
    apart_ = apart_ || had;
  }
  lower_level_ = model::FindModelKind(kind, "[" + stage + "]").lower_level;
  if (apart_ && lower_level_ == nullptr) {
    throw Error(stage,
                "--sentence-lr-scale and --freeze-sentence-steps set a model's lower level (SMITH's "
                "sentence-block encoder) apart from its upper layers; a " +
                    kind + " model has no such levels");
  }
}

std::unique_ptr<torch::optim::AdamW> SentenceLevel::MakeOptimizer(torch::nn::Module& module,
                                                                  const OptimizerOptions& options) {
  if (!apart_) return MakeAdamW(module, options, {}, &lower_groups_);  // factors of 1 (finetune appends its own)
  for (const auto& p : module.named_parameters()) {
    if (lower_level_(p.key())) parameters_.push_back(p.value());
  }
  return MakeAdamW(module, options, lower_level_, &lower_groups_);
}

void SentenceLevel::BeginStep(int64_t step) {
  for (torch::Tensor& p : parameters_) p.requires_grad_(step >= freeze_steps_);
}

std::vector<double> SentenceLevel::LrFactors(int64_t step) const {
  std::vector<double> factors;
  for (bool lower : lower_groups_) factors.push_back(!lower ? 1.0 : step < freeze_steps_ ? 0.0 : scale_);
  return factors;
}

std::vector<torch::Tensor> SentenceLevel::Frozen(int64_t step) const {
  return step < freeze_steps_ ? parameters_ : std::vector<torch::Tensor>{};
}

void SentenceLevel::Save(nlohmann::json* trainer) const {
  if (apart_) (*trainer)["sentence_level_groups"] = true;
}

}  // namespace docmatch::train
