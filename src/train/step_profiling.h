// Where a training step's time and memory go: the GPU's peak memory, the
// time of each phase (--time-split), and steps traced by PyTorch's profiler
// (--profile-steps).
#pragma once

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "train/optimizer.h"

namespace docmatch::train {

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

}  // namespace docmatch::train
