// Peak memory, phase timing and the step profiler (step_profiling.h).
#include "train/step_profiling.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <glog/logging.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>
#include <stdexcept>

#include "dist/runtime.h"

namespace docmatch::train {

double PeakDeviceMemoryGiB(const torch::Device& device) {
  const c10::CachingDeviceAllocator::DeviceStats stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(dist::ResolveDevice(device).index());
  const auto& peak = stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  return static_cast<double>(peak) / (1024.0 * 1024.0 * 1024.0);
}

PhaseTimer::PhaseTimer(bool enabled, const torch::Device& device)
    : enabled_(enabled), device_(device), last_(std::chrono::steady_clock::now()) {}

void PhaseTimer::Mark(const std::string& phase) {
  if (!enabled_) return;
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  const auto now = std::chrono::steady_clock::now();
  seconds_[phase] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

std::map<std::string, double> PhaseTimer::Take(int64_t steps) {
  std::map<std::string, double> out;
  if (!enabled_ || steps <= 0) return out;
  double total = 0;
  for (const auto& [phase, seconds] : seconds_) {
    out["time/" + phase + "_ms"] = 1e3 * seconds / static_cast<double>(steps);
    total += seconds;
  }
  out["time/step_ms"] = 1e3 * total / static_cast<double>(steps);
  seconds_.clear();
  return out;
}

StepProfiler::StepProfiler(const LoopOptions& options, const std::string& stage, int rank, int64_t start_step,
                           const torch::Device& device)
    : run_(options.run), stage_(stage), rank_(rank), device_(device) {
  if (options.profile_steps.empty()) return;
  std::tie(first_, last_) = ParseStepRange(options.profile_steps);
  if (last_ <= start_step || first_ > options.steps) {
    if (rank == 0) {
      LOG(WARNING) << "[" << stage << "] --profile-steps " << options.profile_steps << ": no such step in this run "
                   << "(steps " << start_step + 1 << "-" << options.steps << "), nothing profiled";
    }
    first_ = last_ = 0;
  }
}

StepProfiler::StepProfiler(int64_t first, int64_t last, std::string path, const torch::Device& device)
    : first_(first), last_(last), path_(std::move(path)), device_(device) {}

StepProfiler::~StepProfiler() {
  if (on_) Save();
}

void StepProfiler::Begin(int64_t step) {
  if (first_ <= 0 || step > last_ || step < first_ - 1) return;
  namespace profiler = torch::profiler::impl;
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO, /*report_input_shapes=*/true);
  std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(profiler::ActivityType::CUDA);
  if (!prepared_) {  // a step ahead where there is one
    torch::autograd::profiler::prepareProfiler(config, activities);
    prepared_ = true;
  }
  if (step < first_) return;
  if (!on_) {
    torch::autograd::profiler::enableProfiler(config, activities);
    on_ = true;
    traced_first_ = step;
  }
  span_.reset();  // before its name changes: the span holds a view of it
  span_name_ = "docmatch step " + std::to_string(step);
  span_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  span_->before(std::string_view(span_name_), c10::ArrayRef<const c10::IValue>{});
  traced_last_ = step;
}

void StepProfiler::End(int64_t step) {
  if (!on_) return;
  span_.reset();  // the step's span ends
  if (step >= last_) Save();
}

void StepProfiler::Save() {
  span_.reset();
  on_ = false;
  const std::string path = path_.empty() ? ProfilePath(run_, traced_first_, traced_last_, rank_) : path_;
  try {
    // The last kernels into the trace; not while an exception unwinds, when a
    // queued collective may wait for peers that never come.
    if (device_.is_cuda() && std::uncaught_exceptions() == 0) torch::cuda::synchronize(device_.index());
    const std::unique_ptr<torch::autograd::profiler::ProfilerResult> result =
        torch::autograd::profiler::disableProfiler();
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    if (!folder.empty()) std::filesystem::create_directories(folder);
    result->save(path);
    if (!std::filesystem::exists(path)) throw std::runtime_error("the profiler wrote no file");
  } catch (const std::exception& e) {
    LOG(WARNING) << "[" << stage_ << "] the profile of steps " << traced_first_ << "-" << traced_last_
                 << " was not written to " << path << ": " << e.what() << " (training goes on)";
    return;
  }
  if (rank_ == 0) {
    LOG(INFO) << "[" << stage_ << "] steps " << traced_first_ << "-" << traced_last_ << " profiled: " << path << " ("
              << (path_.empty() ? "each rank its own .rank-R.json; " : "")
              << "a Chrome trace, which bench/profile_table.py sums by op)";
  }
}

std::pair<int64_t, int64_t> ParseStepRange(const std::string& text) {
  const auto bad = [&] {
    return std::invalid_argument("'" + text + "' is not a step range: A:B with whole steps 1 <= A <= B (e.g. 20:22), " +
                                 "or one step A");
  };
  const auto number = [&](const std::string& part) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 18) throw bad();
    const int64_t value = std::stoll(part);
    if (value < 1) throw bad();
    return value;
  };
  const size_t colon = text.find(':');
  const int64_t first = number(text.substr(0, colon));
  const int64_t last = colon == std::string::npos ? first : number(text.substr(colon + 1));
  if (last < first) throw bad();
  return {first, last};
}

std::string ProfilePath(const std::string& run, int64_t first, int64_t last, int rank) {
  return run + "/profile/steps-" + std::to_string(first) + "-" + std::to_string(last) + ".rank-" +
         std::to_string(rank) + ".json";
}

}  // namespace docmatch::train
