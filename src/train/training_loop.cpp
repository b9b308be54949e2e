// The one training loop (training_loop.h): set-up and resume, then each step
// as a sequence of named phases.
#include "train/training_loop.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>

#include "console/error.h"
#include "console/progress.h"
#include "dist/gradient_synchronizer.h"
#include "train/autocast.h"
#include "train/best_model.h"
#include "train/captured_step.h"
#include "train/sentence_level.h"
#include "train/step_profiling.h"

namespace docmatch::train {
namespace {

// The gradient synchronizer's options from --bucket-mb and --bf16-gradients.
dist::SynchronizerOptions SynchronizerOptionsOf(const LoopOptions& options) {
  return {static_cast<int64_t>(options.bucket_mb * (1 << 20)), options.bf16_gradients};
}

// Averages the gradients (Finalize), clips `module`'s, sets the scheduled
// learning rate for `step` (times lr_factors[g] in parameter group g) and
// steps. `frozen` parameters lose their gradient first: no update, and no
// part in the clipping norm. The wait for the gradients is charged to "comm"
// and the update to "optimizer". The gradients are then dropped; with
// `captured` (a stage whose micro-steps replay graphs), clipping, the step
// and the gradients zeroed in place are its replayed graph instead.
// Returns the gradients' global norm before clipping when clipping is on,
// `want_norm` (a step that logs) or `captured`, else an undefined tensor.
torch::Tensor OptimizerStep(dist::GradientSynchronizer& synchronizer, torch::nn::Module& module,
                            torch::optim::Optimizer& optimizer, const OptimizerOptions& options, int64_t step,
                            PhaseTimer& timer, const std::vector<double>& lr_factors,
                            const std::vector<torch::Tensor>& frozen, bool want_norm,
                            CapturedOptimizerStep* captured) {
  synchronizer.Finalize();
  timer.Mark("comm");
  SetLearningRate(optimizer, LearningRate(options, step), lr_factors);
  if (captured != nullptr) {
    TORCH_CHECK(frozen.empty(), "a captured update steps every parameter with a gradient; none can be frozen");
    torch::Tensor norm = captured->Step();
    timer.Mark("optimizer");
    return norm;
  }
  // Frozen parameters: no gradient, so neither the clipping norm nor AdamW's
  // moments and step count see this step.
  for (const torch::Tensor& p : frozen) p.mutable_grad() = torch::Tensor();
  torch::Tensor norm;
  if (options.max_grad_norm > 0) {
    norm = ClipGradientNorm(module.parameters(), options.max_grad_norm);
  } else if (want_norm) {
    norm = GradientNorm(module.parameters());
  }
  optimizer.step();
  optimizer.zero_grad();
  timer.Mark("optimizer");
  return norm;
}

// The step instead, after a loss that was not finite (CheckFinite returned
// false): the gradients' collectives run as on every rank (Finalize), then
// the gradients are dropped; no update.
void SkipStep(dist::GradientSynchronizer& synchronizer, torch::optim::Optimizer& optimizer, bool keep_gradients) {
  synchronizer.Finalize();
  optimizer.zero_grad(/*set_to_none=*/!keep_gradients);
}

// Whether step `step` (numbered from 1) logs its metrics: every --log-every
// steps, and the last.
bool LogDue(const LoopOptions& options, int64_t step) { return step % options.log_every == 0 || step == options.steps; }

// Whether it ends with a checkpoint: every --checkpoint-every steps, the
// last, and a step after which the run stops early or was interrupted.
bool CheckpointDue(const LoopOptions& options, int64_t step, const LoopResult& result) {
  return step % options.checkpoint_every == 0 || step == options.steps || result.stopped_early || result.interrupted ||
         result.out_of_time;
}

// A loss that is NaN or Inf (the global value, the same on every rank):
// with policy "stop" throws naming the step and this rank's documents (ids
// from `corpus`); with "skip" warns and returns false (drop this step's
// update). Returns true for a finite loss.
bool CheckFinite(double value, int64_t step, OnNonFinite policy, const data::Corpus& corpus,
                 const std::vector<int64_t>& documents) {
  if (std::isfinite(value)) return true;
  std::string ids;
  for (int64_t i : documents) ids += (ids.empty() ? "" : ", ") + corpus.Get(i).id;
  const std::string message = "[train] loss is " + std::to_string(value) + " at step " + std::to_string(step + 1) +
                              "; this rank's documents: " + ids;
  if (policy != OnNonFinite::kSkip)
    throw std::runtime_error(message + " (--on-nonfinite skip drops such steps instead)");
  LOG(WARNING) << message << ": step skipped";
  return false;
}

// The constructor sets the run up (or resumes it); Run() takes the steps.
class TrainingLoop {
 public:
  TrainingLoop(TrainingStage& stage, const LoopOptions& options, dist::ProcessGroup& group);
  LoopResult Run();

 private:
  // A step's objective, and what its batches held.
  struct StepLosses : StepObjective {
    int64_t items = 0;
  };

  StepLosses ForwardBackward();  // the step's micro-steps, gradients accumulated
  // One micro-step on the batch taken: its objective, backward (the
  // gradients synced when `last`), and its share of the step's losses and counts.
  void MicroStep(bool last, StepLosses* losses);
  void Update(bool finite);         // gradients averaged, clipped and applied; dropped after a non-finite loss
  void Report(StepLosses& losses);  // the progress bar; every --log-every steps the metrics
  void ValidateWhenDue();           // the validation, the best model and early stopping
  void CheckpointWhenDue();         // at every --checkpoint-every, the last step, a stop or an interruption
  void CheckSameCorpus(const ResumedState& resumed) const;  // a resume on a corpus prepared again is refused
  // Per optimizer group, times the scheduled learning rate: the two levels', then the stage's own.
  std::vector<double> LrFactors() const {
    std::vector<double> factors = levels_.LrFactors(step_);
    stage_.AddLrFactors(&factors);
    return factors;
  }
  std::string Prefix() const { return std::string("[") + stage_.name() + "]"; }

  TrainingStage& stage_;
  const LoopOptions& options_;
  dist::ProcessGroup& group_;
  const torch::Device device_;
  SentenceLevel levels_;  // SMITH's sentence level, when it has groups of its own
  dist::GradientSynchronizer synchronizer_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<CapturedOptimizerStep> captured_update_;  // for a stage that CapturesSteps
  TrainingRun run_;
  BestModel best_;
  int64_t step_ = 0;
  torch::Tensor grad_norm_;  // the last update's gradient norm before clipping, when computed
  // Their clocks start with the first step.
  std::optional<console::ProgressBar> bar_;
  std::optional<PhaseTimer> timer_;
  std::optional<StepProfiler> profiler_;
  int64_t tokens_ = 0, documents_ = 0;  // all ranks' since the start
  double flops_ = 0;                    // this rank's model FLOPs since the last log
  // Throughput over the last log interval (not since the start, so that a
  // warm-up or a slow validation does not blur the steady rate).
  int64_t logged_tokens_ = 0, logged_documents_ = 0, timed_from_ = 0;
  double logged_seconds_ = 0;
  LoopResult result_;
};

TrainingLoop::TrainingLoop(TrainingStage& stage, const LoopOptions& options, dist::ProcessGroup& group)
    : stage_(stage),
      options_(options),
      group_(group),
      device_(group.device()),
      levels_(options, stage.info().config.kind, stage.name()),
      synchronizer_(stage.TrainedParameters(), group, SynchronizerOptionsOf(options)),
      optimizer_(levels_.MakeOptimizer(stage.module(), options.optimizer)),
      run_(options.run, options.keep_last, group),
      best_(options.run, options.patience) {
  synchronizer_.BroadcastParameters();
  stage_.AddOptimizerGroups(optimizer_.get());
  run_.set_console_lines(!options.progress);
  // Dropout draws: a per-rank stream, saved and restored with checkpoints.
  torch::manual_seed(options.seed + 1 + static_cast<uint64_t>(group.rank()));
  const std::optional<ResumedState> resumed = run_.Resume(options.resume, stage_.module(), *optimizer_, stage_.info());
  if (resumed) CheckSameCorpus(*resumed);
  run_.RecordConfig(options.config_yaml, resumed.has_value());
  step_ = resumed ? resumed->step : 0;
  if (resumed) best_.Restore(resumed->trainer);
  if (stage_.CapturesSteps()) {
    auto* fused = dynamic_cast<FusedAdamW*>(optimizer_.get());
    TORCH_CHECK(fused != nullptr, "a stage that captures its steps needs a FusedAdamW (MakeAdamW's)");
    captured_update_ = std::make_unique<CapturedOptimizerStep>(
        *fused, stage_.module().parameters(), stage_.TrainedParameters(), device_,
        CapturedOptimizerStep::Options{options.optimizer.max_grad_norm});
  }
  stage_.Start(resumed);
}

// What a checkpoint keeps of its corpus: a corpus prepared again with other
// texts under the same tokenizer differs in these counts, and the data
// position a resume carries over would then point into other documents.
nlohmann::json CorpusCounts(const data::Corpus& corpus) {
  const data::ShardCounts& t = corpus.manifest().totals;
  return {{"documents", t.documents}, {"paragraphs", t.paragraphs}, {"sentences", t.sentences}, {"tokens", t.tokens}};
}

void TrainingLoop::CheckSameCorpus(const ResumedState& resumed) const {
  const auto stored = resumed.trainer.find("corpus");
  if (stored == resumed.trainer.end()) return;  // written before checkpoints kept it
  const nlohmann::json now = CorpusCounts(stage_.corpus());
  if (*stored == now) return;
  throw Error(stage_.name(),
              options_.run + " was trained up to step " + std::to_string(resumed.step) + " on a corpus of " +
                  stored->dump() + ", and " + stage_.corpus().directory() + " now holds " + now.dump() +
                  ": it was prepared again with other texts, so the data position cannot carry over. Resume "
                  "on the corpus it was trained on; or continue its weights on this one with --init " +
                  resumed.folder + " and another --run; or start over with --fresh");
}

LoopResult TrainingLoop::Run() {
  bar_.emplace(Prefix() + " step", options_.steps, "steps", stage_.unit(), group_.rank() == 0 && options_.progress);
  bar_->Resume(step_);
  stage_.module().train();
  timer_.emplace(options_.time_split, device_);
  profiler_.emplace(options_, stage_.name(), group_.rank(), /*start_step=*/step_, device_);
  timed_from_ = step_;
  const auto started = std::chrono::steady_clock::now();
  while (step_ < options_.steps && !result_.stopped_early && !result_.interrupted && !result_.out_of_time) {
    profiler_->Begin(step_ + 1);
    levels_.BeginStep(step_);
    StepLosses losses = ForwardBackward();
    Update(losses.finite);
    ++step_;
    stage_.AfterStep(step_);
    Report(losses);
    ValidateWhenDue();
    result_.interrupted = run_.StopRequested(step_);
    if (options_.max_seconds > 0 && step_ < options_.steps) {  // every rank stops where any ran out
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      result_.out_of_time = group_.control().Any(seconds >= options_.max_seconds);
    }
    CheckpointWhenDue();
    timer_->Mark("other");  // the stage's end of step, progress, logging, validation, checkpoints
    profiler_->End(step_);
  }
  bar_->Finish();
  result_.step = step_;
  result_.best_step = best_.best_step();
  result_.best_valid_loss = best_.best_loss();
  return result_;
}

TrainingLoop::StepLosses TrainingLoop::ForwardBackward() {
  StepLosses losses;
  for (int64_t micro = 0; micro < options_.accumulation; ++micro) {
    stage_.NextBatch();
    timer_->Mark("data");
    MicroStep(/*last=*/micro + 1 == options_.accumulation, &losses);
    stage_.DropBatch();  // after its objective, whose backward may still read the batch
  }
  return losses;
}

void TrainingLoop::MicroStep(bool last, StepLosses* losses) {
  std::optional<Objective> computed;
  {
    const Autocast autocast(device_, options_.precision);
    computed = stage_.Compute();
  }
  const Objective& objective = *computed;
  // After a non-finite micro-step the step is dropped: the rest are not checked.
  const bool usable = losses->finite && CheckFinite(objective.value, step_, options_.on_nonfinite, stage_.corpus(),
                                                    stage_.BatchDocuments());
  timer_->Mark("forward");
  Backward(objective, 1.0 / static_cast<double>(options_.accumulation),
           [&](bool last_pass) { synchronizer_.Prepare(/*sync=*/last && last_pass); });
  timer_->Mark("backward");
  losses->Add(objective, options_.accumulation, usable);
  const BatchCounts counts = stage_.Counts();
  losses->items += counts.items;
  documents_ += counts.documents;
  tokens_ += counts.tokens;
  flops_ += counts.flops;
}

void TrainingLoop::Update(bool finite) {
  if (finite) {
    // step_ is the step being taken, numbered from 0 here; Report sees it as step_ + 1.
    grad_norm_ = OptimizerStep(synchronizer_, stage_.module(), *optimizer_, options_.optimizer, step_, *timer_,
                               LrFactors(), levels_.Frozen(step_), LogDue(options_, step_ + 1), captured_update_.get());
  } else {
    grad_norm_ = torch::Tensor();
    SkipStep(synchronizer_, *optimizer_, stage_.CapturesSteps());
  }
}

void TrainingLoop::Report(StepLosses& losses) {
  std::string status = "loss " + std::to_string(losses.value).substr(0, 6);
  if (const char* headline = stage_.headline()) {
    status += std::string("  ") + headline + " " + std::to_string(losses.parts[headline]).substr(0, 5);
  }
  bar_->SetStatus(status + "  " + console::HumanCount(tokens_ / bar_->seconds()) + " tokens/s");
  bar_->Add(1, losses.items);
  if (!LogDue(options_, step_)) return;
  std::map<std::string, double>& parts = losses.parts;
  if (losses.diagnostics) parts.merge(losses.diagnostics());
  parts["loss"] = losses.value;
  parts["lr"] = LearningRate(options_.optimizer, step_ - 1);
  parts["epoch"] = stage_.epoch_progress();
  if (grad_norm_.defined()) parts["grad_norm"] = grad_norm_.item<double>();  // before clipping
  const double interval = std::max(1e-9, bar_->seconds() - logged_seconds_);
  parts["docs_per_s"] = static_cast<double>(documents_ - logged_documents_) / interval;
  parts["tokens_per_s"] = static_cast<double>(tokens_ - logged_tokens_) / interval;
  logged_seconds_ = bar_->seconds();
  logged_documents_ = documents_;
  logged_tokens_ = tokens_;
  if (device_.is_cuda()) parts["gpu_peak_gib"] = PeakDeviceMemoryGiB(device_);
  std::map<std::string, double> times = timer_->Take(step_ - timed_from_);
  if (times.count("time/step_ms") && flops_ > 0) {  // this rank's achieved model FLOP rate
    parts["model_tflops_per_s"] = flops_ / (times["time/step_ms"] * (step_ - timed_from_) * 1e-3) / 1e12;
  }
  flops_ = 0;
  parts.merge(times);
  timed_from_ = step_;
  run_.Log(step_, "train", parts);
}

void TrainingLoop::ValidateWhenDue() {
  const int64_t every = stage_.validate_every();
  if (every <= 0 || (step_ % every != 0 && step_ != options_.steps)) return;
  std::map<std::string, double> values;
  {
    const Autocast autocast(device_, options_.precision);  // validated as trained
    values = stage_.Validate();
  }
  run_.Log(step_, "valid", values);
  result_.stopped_early = best_.Update(values.at("loss"), step_, stage_.module(), stage_.info(), group_);
}

void TrainingLoop::CheckpointWhenDue() {
  if (!CheckpointDue(options_, step_, result_)) return;
  const DataPosition now = stage_.Position();
  nlohmann::json trainer = {{"validation", best_.ToJson()}, {"corpus", CorpusCounts(stage_.corpus())}};
  stage_.Save(&trainer);
  levels_.Save(&trainer);
  if (captured_update_) captured_update_->SyncHostSteps();  // the optimizer's step counts, from the device
  run_.Save(step_, now.epoch, now.position, stage_.module(), *optimizer_, stage_.info(), trainer);
}

}  // namespace

LoopResult RunTrainingLoop(TrainingStage& stage, const LoopOptions& options, dist::ProcessGroup& group) {
  return TrainingLoop(stage, options, group).Run();
}

}  // namespace docmatch::train
