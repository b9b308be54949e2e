// The best model of a run by its validation loss, kept in <run>/best/, and
// early stopping.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "dist/process_group.h"
#include "io/model_folder.h"

namespace docmatch::train {

// The validation record both stages keep: the best loss so far and its step,
// the model of that step in <run>/best/ (a model folder, replaced through a
// temporary name), and early stopping after `patience` validations without
// improvement. It travels in trainer.json ("validation") so a resumed run
// goes on counting.
class BestModel {
 public:
  BestModel(std::string run, int64_t patience) : run_(std::move(run)), patience_(patience) {}
  void Restore(const nlohmann::json& trainer);
  nlohmann::json ToJson() const;

  // Collective. Records `loss` (the same on every rank) at `step`; rank 0
  // writes <run>/best/ when it is the best so far. Returns true when the run
  // should stop early.
  bool Update(double loss, int64_t step, torch::nn::Module& module, const io::ModelFolderInfo& info,
              dist::ProcessGroup& group);

  int64_t best_step() const { return best_step_; }  // -1 before the first validation
  double best_loss() const { return best_loss_; }
  int64_t bad_validations() const { return bad_; }

 private:
  std::string run_;
  int64_t patience_;
  int64_t best_step_ = -1, bad_ = 0;
  double best_loss_ = 0;
};

}  // namespace docmatch::train
