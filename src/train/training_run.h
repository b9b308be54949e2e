// What every training stage (pretrain, finetune) shares around its step:
// resuming from and writing checkpoints, logging metrics on rank 0, and the
// optimizer step with clipping and the learning-rate schedule.
//
// A checkpoint step-<N>/ holds
//   model.pt, config.json   the model folder (io/model_folder.h)
//   optimizer.pt            AdamW state
//   trainer.json            step, epoch, world size, every rank's data position,
//                           the stage's options and any state of its own
//   rng.pt                  every rank's CPU generator state (dropout)
//   rng-cuda.pt             and its CUDA generator state, for runs on GPUs
// so that a resumed run on as many ranks continues bit for bit on CPU.
#pragma once

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/gradient_synchronizer.h"
#include "dist/process_group.h"
#include "io/checkpoint.h"
#include "io/model_folder.h"
#include "io/tensorboard.h"
#include "train/optimizer.h"

namespace docmatch::train {

// The loop options as trainer.json records them.
nlohmann::json LoopOptionsJson(const LoopOptions& options);

// The state a stage resumes from.
struct ResumedState {
  std::string folder;
  int64_t step = 0, epoch = 0;
  int64_t position = 0;    // this rank's data position (re-sharded on another world size)
  nlohmann::json trainer;  // the whole trainer.json
};

// Forward passes under autocast while alive, for LoopOptions::precision
// "bf16": matrix products in bfloat16 on the run's device (CUDA, or CPU),
// parameters and their optimizer state stay float32 (the master weights), and
// no loss scaling is needed (bf16 has float32's exponent range). "fp32" does
// nothing. Run backward() after the guard ends.
class Autocast {
 public:
  Autocast(const torch::Device& device, const std::string& precision);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false;
  at::DeviceType device_type_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

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

// The most memory the caching allocator has held on a CUDA device since the
// process started, in GiB.
double PeakDeviceMemoryGiB(const torch::Device& device);

// Where a step's time goes (--time-split): Mark(phase) charges the time since
// the previous mark to `phase`. On a GPU each mark first waits for the device,
// so that a phase's kernels are charged to it and not to whichever phase
// happens to wait for them (which costs some overlap: measure with it, train
// without it). Disabled, a mark costs nothing.
class PhaseTimer {
 public:
  PhaseTimer(bool enabled, const torch::Device& device);
  bool enabled() const { return enabled_; }
  void Mark(const std::string& phase);
  // Milliseconds per step of each phase since the last Take, as "time/<phase>_ms"
  // plus "time/step_ms", over `steps` steps; then starts over.
  std::map<std::string, double> Take(int64_t steps);

 private:
  bool enabled_;
  torch::Device device_;
  std::chrono::steady_clock::time_point last_;
  std::map<std::string, double> seconds_;
};

// Some steps of a run under PyTorch's profiler (--profile-steps A:B): the
// host's ops with their input shapes and, on a GPU, its kernels, copies and
// CUDA runtime calls (the host's waits among them), written by each rank as a
// Chrome trace (chrome://tracing, Perfetto; bench/profile_table.py sums it by
// op). Each profiled step is one span, "docmatch step N", from before its
// batch is taken to after its checkpoint, so the data wait, logging and
// checkpoints of those steps show too. The profiler is prepared one step
// ahead, so that the first traced step does not carry its start. A trace that
// cannot be written is reported, and training goes on. Off (first 0), it
// costs nothing.
class StepProfiler {
 public:
  // The loop's --profile-steps (LoopOptions::profile_steps) for this rank,
  // whose loop starts after step `start_step` (0, or the step resumed from):
  // the steps traced, a..b, go to ProfilePath(options.run, a, b, rank), written
  // when step B ends, or when the profiler goes out of scope inside the range
  // (a run that stopped early). Rank 0 says where, prefixed with `stage`, and
  // warns when the range holds no step this run will take.
  StepProfiler(const LoopOptions& options, const std::string& stage, int rank, int64_t start_step,
               const torch::Device& device);
  // Steps first..last of a loop of one's own, traced to `path` (smith_step).
  StepProfiler(int64_t first, int64_t last, std::string path, const torch::Device& device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void Begin(int64_t step);  // step `step` (numbered as logged, from 1) is about to run
  void End(int64_t step);    // it ran

 private:
  void Save();

  int64_t first_ = 0, last_ = 0;
  std::string path_;  // fixed; empty: ProfilePath(run_, ...) of the steps traced
  std::string run_, stage_ = "profile";
  int rank_ = 0;
  torch::Device device_;
  bool prepared_ = false, on_ = false;
  int64_t traced_first_ = 0, traced_last_ = 0;
  std::string span_name_;
  std::unique_ptr<at::RecordFunction> span_;
};

// "A:B" (or "A", one step) as --profile-steps takes it: 1 <= A <= B. Throws
// std::invalid_argument saying what is wrong.
std::pair<int64_t, int64_t> ParseStepRange(const std::string& text);

// Where rank `rank` writes the trace of steps first..last of `run`:
// <run>/profile/steps-<first>-<last>.rank-<rank>.json.
std::string ProfilePath(const std::string& run, int64_t first, int64_t last, int rank);

// SMITH's two levels trained apart (--sentence-lr-scale,
// --freeze-sentence-steps of LoopOptions): the sentence-block encoder
// (model::SmithSentenceLevel) in optimizer groups of its own, at its own
// multiple of the schedule, and frozen for the first steps: no graph through
// it (requires_grad off, so neither its activations are kept nor its backward
// run) and no update. A run that began with the levels apart keeps its groups
// when resumed without the flags (its optimizer state has them); one that
// began without cannot gain them. Off (one group set, nothing frozen) when
// neither flag is given to a run that never had them.
class SentenceLevel {
 public:
  // Checks the flags against the model's `kind` (SMITH only) and against the
  // latest checkpoint of `run` when `resume`; throws, prefixed with `stage`,
  // with what to do instead.
  SentenceLevel(const LoopOptions& options, const std::string& kind, const std::string& stage);

  // The optimizer of `module` (MakeAdamW), with the sentence level's groups
  // when the levels are apart.
  std::unique_ptr<torch::optim::AdamW> MakeOptimizer(torch::nn::Module& module, const OptimizerOptions& options);
  // Before step `step`'s forward: the sentence level needs a graph only once
  // it is no longer frozen.
  void BeginStep(int64_t step);
  // TrainingRun::Step's lr_factors for step `step`, one per group of
  // MakeOptimizer's optimizer (1 for the document level; the scale, or 0
  // while frozen, for the sentence level).
  std::vector<double> LrFactors(int64_t step) const;
  // TrainingRun::Step's `frozen` for step `step`.
  std::vector<torch::Tensor> Frozen(int64_t step) const;
  // Into a checkpoint's trainer state: whether the groups are apart.
  void Save(nlohmann::json* trainer) const;

 private:
  double scale_;
  int64_t freeze_steps_;
  bool apart_;
  std::vector<bool> lower_groups_;
  std::vector<torch::Tensor> parameters_;  // the sentence level's
};

class TrainingRun {
 public:
  // Rank 0 locks the run folder for the life of this object (an advisory
  // flock on <run>/.lock): a second run on the same folder is refused at
  // once, naming the holder's pid and host, instead of the two overwriting
  // each other's checkpoints and logs.
  TrainingRun(const std::string& run, int keep_last, dist::ProcessGroup& group);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // With `resume` and a checkpoint in the run: checks the checkpoint's files
  // against their checksums, then loads the module, the optimizer (its state
  // onto this rank's device, wherever it was written) and (same world size)
  // this rank's generator; otherwise nullopt. A damaged or
  // unreadable file is named, with the previous checkpoint to fall back on.
  // Either way rank 0 then drops the metrics and TensorBoard events logged
  // after the step it starts from, so the logs hold each step once.
  // `writes` describes what this run's checkpoints hold: a checkpoint made
  // with another model config or tokenizer is refused before anything loads,
  // saying how to go on without removing any checkpoint.
  std::optional<ResumedState> Resume(bool resume, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                     const io::ModelFolderInfo& writes);
  // The trainer.json of `run`'s newest checkpoint, read without taking the
  // run: for what must be known before the optimizer Resume loads into is
  // built. Null when there is no checkpoint or the file does not parse
  // (Resume names that one).
  static nlohmann::json LatestTrainerState(const std::string& run);

  // Where a stage's model comes from. A run that resumes (`resume` and a
  // checkpoint in `run`) takes its own newest checkpoint's model: --init
  // (which may be gone by now, or a `latest` that moved on) is not read
  // again, and rank 0 says so when --init was given. `folder` is that
  // checkpoint, else `init` ("" when neither: the model comes from a config).
  struct ModelSource {
    bool resuming = false;
    std::string folder;
  };
  static ModelSource SourceOfModel(const std::string& run, bool resume, const std::string& init,
                                   const std::string& stage, int rank);

  // Rank 0 keeps `config` (the command's resolved options in --dump-config's
  // YAML; nothing happens when it is empty) as <run>/config.yaml. When the
  // run resumes, it first warns naming each option whose value differs from
  // the config.yaml the run had.
  void RecordConfig(const std::string& config, bool resumed);

  // Collective: every rank calls it. Rank 0 writes step-<step>/ with the
  // module as a model folder described by `info`; `trainer` gets step, epoch,
  // world_size and positions added.
  std::string Save(int64_t step, int64_t epoch, int64_t position, torch::nn::Module& module,
                   torch::optim::Optimizer& optimizer, const io::ModelFolderInfo& info, nlohmann::json trainer);

  // Collective, once per step: whether any rank got SIGUSR1, SIGTERM or
  // SIGINT since this run started (a scheduler's warning before preemption
  // or the time limit, or Ctrl-C). The caller then writes a checkpoint and
  // stops with kExitInterrupted. A second signal (a double Ctrl-C) is only
  // acknowledged, so the checkpoint is not lost; a third takes the signal's
  // default action.
  bool StopRequested(int64_t step);

  // Rank 0: one JSON line in <run>/metrics.jsonl and TensorBoard scalars
  // "<prefix>/<name>"; with console lines on, the same values as one plain
  // line on stderr. Other ranks do nothing.
  void Log(int64_t step, const std::string& prefix, const std::map<std::string, double>& values);
  // Console lines for Log: on where no progress bar shows the loss
  // (--no-progress, batch jobs and their logs).
  void set_console_lines(bool on) { console_lines_ = on; }

  // The gradient synchronizer's options from the loop's --bucket-mb and
  // --bf16-gradients.
  static dist::SynchronizerOptions Synchronizer(const LoopOptions& options) {
    return {static_cast<int64_t>(options.bucket_mb * (1 << 20)), options.bf16_gradients};
  }

  // Averages the gradients (Finalize), clips `module`'s, sets the scheduled
  // learning rate for `step` (times lr_factors[g] in parameter group g, where
  // given) and steps; returns the learning rate used. `frozen` parameters
  // lose their gradient first: no update, and no part in the clipping norm.
  // With a timer, the wait for the gradients is charged to "comm" and the
  // update to "optimizer".
  static double Step(dist::GradientSynchronizer& synchronizer, torch::nn::Module& module,
                     torch::optim::Optimizer& optimizer, const OptimizerOptions& options, int64_t step,
                     PhaseTimer* timer = nullptr, const std::vector<double>& lr_factors = {},
                     const std::vector<torch::Tensor>& frozen = {});

  // The step instead, after a loss that was not finite (CheckFinite returned
  // false): the gradients' collectives run as on every rank (Finalize), then
  // the gradients are dropped; no update.
  static void SkipStep(dist::GradientSynchronizer& synchronizer, torch::optim::Optimizer& optimizer);
  // Whether step `step` (numbered from 1) logs its metrics: every --log-every
  // steps, and the last.
  static bool LogDue(const LoopOptions& options, int64_t step);
  // Whether it ends with a checkpoint: every --checkpoint-every steps, the
  // last, and a step after which the run stops early or was interrupted.
  static bool CheckpointDue(const LoopOptions& options, int64_t step, const LoopResult& result);

  // A loss that is NaN or Inf (the global value, the same on every rank):
  // with policy "stop" throws naming the step and this rank's documents (ids
  // from `corpus`); with "skip" warns and returns false (drop this step's
  // update). Returns true for a finite loss.
  static bool CheckFinite(double value, int64_t step, const std::string& policy, const data::Corpus& corpus,
                          const std::vector<int64_t>& documents);

 private:
  // Rank 0: trims the logs to steps <= `step` and opens them for appending.
  void OpenLogs(int64_t step);
  // Everything Resume loads, from `folder`.
  void Load(const std::string& folder, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
            ResumedState* state);

  dist::ProcessGroup& group_;
  torch::Device device_;
  std::string run_;
  int lock_ = -1;  // rank 0's descriptor of <run>/.lock
  io::CheckpointDirectory checkpoints_;
  std::unique_ptr<io::EventWriter> events_;
  std::ofstream metrics_;
  bool console_lines_ = false;
};

}  // namespace docmatch::train
