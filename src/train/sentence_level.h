// A model's lower level trained apart from its upper layers (SMITH's
// sentence-block encoder from its document layers): its own optimizer
// groups, learning-rate multiple and frozen steps. Which parameters are the
// lower level is the kind's to say (model/kinds.h, lower_level).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/optimizer.h"

namespace docmatch::train {

// SMITH's two levels trained apart (--sentence-lr-scale,
// --freeze-sentence-steps of LoopOptions): the sentence-block encoder
// (the kind's lower_level: model::SmithSentenceLevel) in optimizer groups of its own, at its own
// multiple of the schedule, and frozen for the first steps: no graph through
// it (requires_grad off, so neither its activations are kept nor its backward
// run) and no update. A run that began with the levels apart keeps its groups
// when resumed without the flags (its optimizer state has them); one that
// began without cannot gain them. Off (one group set, nothing frozen) when
// neither flag is given to a run that never had them.
class SentenceLevel {
 public:
  // Checks the flags against the model's `kind` (one with a lower level) and against the
  // latest checkpoint of `run` when `resume`; throws, prefixed with `stage`,
  // with what to do instead.
  SentenceLevel(const LoopOptions& options, const std::string& kind, const std::string& stage);

  // The optimizer of `module` (MakeAdamW), with the sentence level's groups
  // when the levels are apart.
  std::unique_ptr<torch::optim::AdamW> MakeOptimizer(torch::nn::Module& module, const OptimizerOptions& options);
  // Before step `step`'s forward: the sentence level needs a graph only once
  // it is no longer frozen.
  void BeginStep(int64_t step);
  // the optimizer step's lr_factors for step `step`, one per group of
  // MakeOptimizer's optimizer (1 for the document level; the scale, or 0
  // while frozen, for the sentence level).
  std::vector<double> LrFactors(int64_t step) const;
  // the optimizer step's `frozen` for step `step`.
  std::vector<torch::Tensor> Frozen(int64_t step) const;
  // Into a checkpoint's trainer state: whether the groups are apart.
  void Save(nlohmann::json* trainer) const;

 private:
  double scale_;
  int64_t freeze_steps_;
  bool apart_;
  bool (*lower_level_)(const std::string& parameter) = nullptr;  // the kind's (model/kinds.h)
  std::vector<bool> lower_groups_;
  std::vector<torch::Tensor> parameters_;  // the sentence level's
};

}  // namespace docmatch::train
