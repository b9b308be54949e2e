// The run folder of a training stage (pretrain, finetune): rank 0's lock on
// it, resuming from and writing checkpoints, the config record, stop
// signals, and the metric logs on rank 0.
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

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/process_group.h"
#include "files/lock_file.h"
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

 private:
  // Rank 0: trims the logs to steps <= `step` and opens them for appending.
  void OpenLogs(int64_t step);
  // Everything Resume loads, from `folder`.
  void Load(const std::string& folder, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
            ResumedState* state);

  dist::ProcessGroup& group_;
  torch::Device device_;
  std::string run_;
  std::unique_ptr<files::LockFile> lock_;  // rank 0's, on <run>/.lock
  io::CheckpointDirectory checkpoints_;
  std::unique_ptr<io::EventWriter> events_;
  std::ofstream metrics_;
  bool console_lines_ = false;
};

}  // namespace docmatch::train
