// The one training loop of every stage (pretrain, finetune), over what a
// stage provides (TrainingStage): its next micro-batch, its objective, its
// validation, its own state in checkpoints, and a hook at the end of a step.
//
// A step reads straight down (TrainingLoop::Run): the micro-steps' forward
// and backward, the update, the stage's end-of-step hook, the report
// (progress bar; every --log-every steps loss, parts, learning rate, epoch,
// docs/s, tokens/s, GPU peak and, where the stage counts FLOPs, TFLOP/s),
// validation when due, the stop request, and the checkpoint when due: the
// same order for every stage. What the loop owns is the same for all of
// them: the gradient synchronizer, the optimizer (with SMITH's sentence-level
// groups), the run folder (lock, resume, logs, checkpoints), the best model,
// the timers and the profiler.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus/corpus.h"
#include "dist/process_group.h"
#include "io/model_folder.h"
#include "train/objectives.h"
#include "train/optimizer.h"
#include "train/training_run.h"

namespace docmatch::train {

// What the micro-batch a stage took holds, for the progress bar and the
// throughput figures: counted on all ranks (this rank's count times the
// world size: ranks hold batches of like size), FLOPs on this rank.
struct BatchCounts {
  int64_t items = 0;      // what the progress bar counts (TrainingStage::unit)
  int64_t documents = 0;  // documents encoded
  int64_t tokens = 0;     // real tokens encoded
  double flops = 0;       // this rank's model FLOPs; 0 when the stage does not count them
};

// Where a stage's data stands, as a checkpoint keeps it: the epoch and this
// rank's position in it.
struct DataPosition {
  int64_t epoch = 0, position = 0;
};

// What differs between training stages. Built with its model on the run's
// device (seeded as the stage needs) and its data read; the loop does the rest.
class TrainingStage {
 public:
  virtual ~TrainingStage() = default;

  // "train" or "finetune": the prefix of log lines, metrics and the profiler's messages.
  virtual const char* name() const = 0;
  // What the progress bar counts ("docs", "pairs"), and the part shown beside
  // the loss on it (e.g. "top1"; nullptr: none).
  virtual const char* unit() const = 0;
  virtual const char* headline() const { return nullptr; }
  virtual torch::nn::Module& module() = 0;
  // Whether the stage's micro-steps replay CUDA graphs (train/captured_step.h),
  // whose backward writes into the .grad tensors they were captured with: the
  // loop then zeroes the gradients instead of dropping them, and replays its
  // one-rank update as a graph too (CapturedOptimizerStep).
  virtual bool CapturesSteps() const { return false; }
  // How checkpoints and best/ describe module().
  virtual const io::ModelFolderInfo& info() const = 0;
  // Names the documents of a batch whose loss is not finite.
  virtual const data::Corpus& corpus() const = 0;

  // What the gradient synchronizer averages: module()'s parameters and any
  // the stage trains beside them (a learned temperature).
  virtual std::vector<torch::Tensor> TrainedParameters() { return module().parameters(); }
  // Optimizer groups of the stage's own, after the model's; and their
  // factors of the scheduled learning rate, appended after the model's.
  virtual void AddOptimizerGroups(torch::optim::AdamW* /*optimizer*/) {}
  virtual void AddLrFactors(std::vector<double>* /*factors*/) const {}
  // After the model and optimizer are restored (or not): the data from the
  // position `resumed` gives (or the start), and the stage's own state.
  virtual void Start(const std::optional<ResumedState>& resumed) = 0;

  // A micro-step: this rank's next micro-batch (charged to "data"), then its
  // objective (the loop holds autocast around it), what it held, and the
  // corpus indices of its documents. DropBatch ends it: the batch's memory
  // goes before the next batch is taken (and before the update), so the
  // stage never holds two taken batches (its loader may be building the next).
  virtual void NextBatch() = 0;
  virtual Objective Compute() = 0;
  virtual BatchCounts Counts() const = 0;
  virtual const std::vector<int64_t>& BatchDocuments() const = 0;
  virtual void DropBatch() = 0;

  // After step `step` (numbered from 1) was applied, before it is reported.
  virtual void AfterStep(int64_t /*step*/) {}
  // The epoch of the last batch taken, for the logs.
  virtual int64_t epoch() const = 0;
  // Epochs done so far, fractional (the logs' epoch, as the Hugging Face
  // Trainer logs it): where the next batch starts, over the epoch's length.
  virtual double epoch_progress() const { return static_cast<double>(epoch()); }

  // Steps between validations (0: never), and the validation itself: the
  // same values on every rank, "loss" among them (the best model's measure).
  virtual int64_t validate_every() const = 0;
  virtual std::map<std::string, double> Validate() = 0;

  // Where the next micro-batch starts, and the stage's options and state
  // for trainer.json.
  virtual DataPosition Position() const = 0;
  virtual void Save(nlohmann::json* trainer) const = 0;
};

// Sets the run up (or resumes it) and trains `stage` for options.steps steps.
LoopResult RunTrainingLoop(TrainingStage& stage, const LoopOptions& options, dist::ProcessGroup& group);

}  // namespace docmatch::train
