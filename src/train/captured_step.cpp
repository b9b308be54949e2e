// SMITH's micro-step on static inputs and the update after it, captured and
// replayed on CUDA (captured_step.h).
#include "train/captured_step.h"

#include <ATen/autocast_mode.h>
#ifdef DOCMATCH_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <glog/logging.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "console/error.h"
#include "model/host_to_device.h"

namespace docmatch::train {

bool GraphPathOnCpu() {
  const char* value = std::getenv("DOCMATCH_GRAPH_PATH_ON_CPU");
  return value != nullptr && std::string(value) == "1";
}

void CheckCudaGraphsRun(const char* stage, const dist::ProcessGroup& group, int64_t freeze_sentence_steps) {
  DOCMATCH_CHECK(group.device().is_cuda() || GraphPathOnCpu(), stage, "--cuda-graphs needs a CUDA device; this run is "
                 "on ", group.device().str(), " (use --device cuda on a GPU machine, or leave the flag out)");
  DOCMATCH_CHECK(group.size() == 1, stage, "--cuda-graphs runs at one rank (the step's collectives are not captured); ",
                 "this run has ", group.size(), ": run one process, or leave the flag out");
  DOCMATCH_CHECK(freeze_sentence_steps == 0, stage,
                 "--cuda-graphs cannot take --freeze-sentence-steps: thawing the sentence level changes the captured "
                 "backward; leave one of them out");
  if (!group.device().is_cuda() && group.rank() == 0)
    LOG(WARNING) << "[" << stage << "] --cuda-graphs on " << group.device().str()
                 << " (DOCMATCH_GRAPH_PATH_ON_CPU=1): the graphs' code path, nothing captured";
}

struct CapturedSmithSteps::Entry {
  model::BlockTensors inputs;  // the bucket's static inputs, on the device
  torch::Tensor scales;        // (2,) float64: the word LM's and the block loss's
  torch::Tensor sums;          // (3,) float64 output: LM, block and top-1 local sums
  SmithSums outputs;           // the candidate pool the diagnostics read
  int64_t uses = 0;
#ifdef DOCMATCH_HAS_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

struct GraphStream {
#ifdef DOCMATCH_HAS_CUDA
  explicit GraphStream(const torch::Device& device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        pool(at::cuda::graph_pool_handle()),
        device(device.index()) {}
  c10::cuda::CUDAStream stream;  // warm-ups, captures and replays
  c10::MempoolId_t pool;         // every graph's temporaries
  c10::DeviceIndex device;
#endif
};

namespace {

// Autocast off while alive (a backward runs outside it, as the loop's does).
class AutocastPaused {
 public:
  explicit AutocastPaused(at::DeviceType type) : type_(type), was_(at::autocast::is_autocast_enabled(type)) {
    at::autocast::set_autocast_enabled(type_, false);
  }
  ~AutocastPaused() { at::autocast::set_autocast_enabled(type_, was_); }
  AutocastPaused(const AutocastPaused&) = delete;
  AutocastPaused& operator=(const AutocastPaused&) = delete;

 private:
  at::DeviceType type_;
  bool was_;
};

#ifdef DOCMATCH_HAS_CUDA
// Autocast's weight cache off while alive: a cast a graph replays must be
// made inside it, not taken from the cache.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool was_;
};

// Work on a GraphStream while alive, ordered after everything queued on the
// current stream before, and everything queued there after waits for it.
class OnGraphStream {
 public:
  explicit OnGraphStream(GraphStream& graphs)
      : graphs_(graphs), main_(c10::cuda::getCurrentCUDAStream(graphs.device)), guard_(graphs.stream) {
    at::cuda::CUDAEvent ready;
    ready.record(main_);
    ready.block(graphs_.stream);
  }
  ~OnGraphStream() {
    at::cuda::CUDAEvent done;
    done.record(graphs_.stream);
    done.block(main_);
  }
  OnGraphStream(const OnGraphStream&) = delete;
  OnGraphStream& operator=(const OnGraphStream&) = delete;

 private:
  GraphStream& graphs_;
  c10::cuda::CUDAStream main_;
  c10::cuda::CUDAStreamGuard guard_;
};

// `body` captured into a graph in the stream's pool (it runs nothing), on
// the stream, which must be current (OnGraphStream). A body that throws ends
// the capture first, so that its error is the one reported, not the failures
// of every later call on a stream still capturing.
std::unique_ptr<at::cuda::CUDAGraph> Capture(GraphStream& graphs, const std::function<void()>& body) {
  c10::cuda::device_synchronize();  // nothing of the eager steps still running into the capture
  const AutocastCacheOff cache_off;
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  graph->capture_begin(graphs.pool);
  try {
    body();
    graph->capture_end();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    if (cudaStreamEndCapture(graphs.stream, &broken) == cudaSuccess && broken != nullptr) cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    c10::cuda::CUDACachingAllocator::endAllocateToPool(graphs.device, graphs.pool);
    throw;
  }
  return graph;
}

// A bucket's step (`body`) on the graph stream: eagerly for its first
// `warmup` uses, then captured into `graph` at the next (`before_capture`
// first drops what the warm-up left in the outputs: nothing outside the
// graph's pool is freed while capturing) and replayed at every use. Returns
// whether this use captured.
bool WarmUpCaptureOrReplay(GraphStream& graphs, int64_t uses, int warmup, std::unique_ptr<at::cuda::CUDAGraph>& graph,
                           const std::function<void()>& body, const std::function<void()>& before_capture) {
  const OnGraphStream on_graph_stream(graphs);
  if (uses < warmup) {
    body();
    return false;
  }
  const bool capturing = graph == nullptr;
  if (capturing) {
    before_capture();
    graph = Capture(graphs, body);
  }
  graph->replay();  // a capture runs nothing: this is the step
  return capturing;
}
#endif

// The capture stream of what captures (null otherwise); a build without
// CUDA captures nothing.
std::unique_ptr<GraphStream> GraphStreamFor(bool captures, const torch::Device& device) {
#ifdef DOCMATCH_HAS_CUDA
  return captures ? std::make_unique<GraphStream>(device) : nullptr;
#else
  (void)device;
  DOCMATCH_CHECK(!captures, "train", "this build has no CUDA: CUDA graphs need one");
  return nullptr;
#endif
}

// A static input: a copy of `from` on first use (storage of its own, not
// the batch's), then `from` written into it in place, where the graph reads;
// the shapes must agree (copy_ would broadcast).
void CopyStatic(torch::Tensor& to, const torch::Tensor& from, bool first) {
  if (first) {
    to = from.defined() ? from.clone() : from;
    return;
  }
  TORCH_CHECK(to.defined() == from.defined() && (!to.defined() || to.sizes() == from.sizes()),
              "a static input of another shape: the bucket's key does not decide its tensors' shapes");
  if (to.defined()) to.copy_(from, /*non_blocking=*/true);
}

// A captured micro-step's backward: it has run in the replay; the loop's
// Backward only checks the scale folded in, and the synchronizer's life
// cycle goes on (one rank: nothing to reduce).
std::function<void(double, const std::function<void(bool)>&)> CapturedBackward(double scale) {
  return [scale](double loop_scale, const std::function<void(bool last)>& prepare) {
    TORCH_CHECK(loop_scale == scale, "a captured step back-propagated at scale ", scale, ", not ", loop_scale);
    prepare(true);
  };
}

// The tensors of a BlockTensors, in one order, for copying one into another.
std::vector<torch::Tensor*> Parts(model::BlockTensors& t) {
  return {&t.tokens,        &t.block_mask,          &t.lm_labels,         &t.layout.real,
          &t.layout.tokens, &t.layout.predicted, &t.layout.masked, &t.layout.counts};
}

}  // namespace

CapturedSmithSteps::CapturedSmithSteps(model::SmithPretraining model, dist::ProcessGroup& group, Options options)
    : model_(std::move(model)),
      group_(group),
      options_(options),
      captures_(options.capture && group.device().is_cuda() && group.size() == 1) {
  DOCMATCH_CHECK(options.warmup_steps >= 1, "train",
                 "a captured step needs at least one eager use of its bucket first (its gradients), not ",
                 options.warmup_steps);
  cuda_ = GraphStreamFor(captures_, group.device());
}

CapturedSmithSteps::~CapturedSmithSteps() {
  if (captures_) {
    LOG(INFO) << "[train] CUDA graphs: " << graphs_ << " captured for " << entries_.size() << " step buckets, "
              << replays_ << " micro-steps replayed";
  }
}

CapturedSmithSteps::Entry& CapturedSmithSteps::StaticInputs(const data::BlockBatch& batch,
                                                            const data::StepShape& shape,
                                                            const std::vector<double>& scales) {
  const torch::Device device = group_.device();
  const Key key{batch.B, shape.S, shape.T, shape.R, shape.N, shape.M, shape.P};
  model::BlockTensors fresh = model::ToTensors(batch, device, &shape);
  const torch::Tensor fresh_scales =
      model::HostToDevice(scales.data(), {static_cast<int64_t>(scales.size())}, torch::kFloat64, device,
                          torch::kFloat64);
  std::unique_ptr<Entry>& slot = entries_[key];
  const bool first = slot == nullptr;
  if (first) slot = std::make_unique<Entry>();
  std::vector<torch::Tensor*> to = Parts(slot->inputs), from = Parts(fresh);
  for (size_t i = 0; i < to.size(); ++i) CopyStatic(*to[i], *from[i], first);
  CopyStatic(slot->scales, fresh_scales, first);
  return *slot;
}

torch::Tensor CapturedSmithSteps::Body(Entry& entry, bool backward) {
  const bool blocks = options_.sentence_blocks;
  SmithSums sums = SmithPretrainingSums(model_, entry.inputs, blocks, group_, options_.detach_block_targets);
  torch::Tensor loss = sums.lm * entry.scales[0];
  if (blocks) loss = loss + sums.block * entry.scales[1];
  const torch::Tensor zero = torch::zeros({}, entry.scales.options());
  entry.sums = torch::stack({sums.lm.detach().to(torch::kFloat64).reshape({}),
                             blocks ? sums.block.detach().to(torch::kFloat64).reshape({}) : zero,
                             blocks ? sums.top1.reshape({}) : zero});
  entry.outputs = SmithSums{};
  entry.outputs.targets = sums.targets;
  entry.outputs.pooled_real = sums.pooled_real;
  if (!backward) return loss;
  const AutocastPaused paused(group_.device().type());
  loss.backward();
  return torch::Tensor();
}

void CapturedSmithSteps::RunOnCaptureStream(Entry& entry) {
#ifdef DOCMATCH_HAS_CUDA
  const bool captured = WarmUpCaptureOrReplay(
      *cuda_, entry.uses, options_.warmup_steps, entry.graph, [&] { Body(entry, /*backward=*/true); },
      [&] {
        entry.sums = torch::Tensor();
        entry.outputs = SmithSums{};
      });
  if (entry.uses < options_.warmup_steps) return;
  ++replays_;
  if (captured) {
    ++graphs_;
    LOG(INFO) << "[train] CUDA graph " << graphs_ << " captured: " << entry.inputs.layout.real.size(0) << " blocks, "
              << entry.inputs.layout.tokens.size(0) << " tokens, " << entry.inputs.layout.predicted.size(0)
              << " predicted words, " << entry.inputs.layout.masked.size(0) << " masked blocks";
  }
#else
  (void)entry;
#endif
}

Objective CapturedSmithSteps::Step(const data::BlockBatch& batch, const data::StepCounts& real,
                                   const data::StepShape& shape, double scale) {
  // The global counts (host values, on the control plane) and each term's
  // share: world / count, the loop's scale folded in where the backward is ours.
  std::vector<double> counts = {static_cast<double>(real.M), static_cast<double>(real.P)};
  group_.control().Sum(counts);
  std::vector<double> scales;
  for (const double count : counts)
    scales.push_back(count > 0 ? static_cast<double>(group_.size()) / count * (captures_ ? scale : 1.0) : 0.0);
  Entry& entry = StaticInputs(batch, shape, scales);
  torch::Tensor loss;
  if (captures_) {
    RunOnCaptureStream(entry);
  } else {
    loss = Body(entry, /*backward=*/false);
  }
  ++entry.uses;
  // The values: every rank's sums, read once (the step's one host sync).
  torch::Tensor sums = entry.sums.clone();
  if (group_.size() > 1) group_.data().AllReduce(sums);
  sums = sums.to(torch::kCPU);
  const double* sum = sums.data_ptr<double>();
  const auto mean = [&](int term, int count) { return counts[count] > 0 ? sum[term] / counts[count] : 0.0; };
  Objective objective;
  objective.loss = loss;
  objective.parts["lm"] = mean(0, 0);
  if (options_.sentence_blocks) objective.parts["block"] = mean(1, 1);
  for (const auto& [name, value] : objective.parts) objective.value += value;
  if (options_.sentence_blocks) {
    objective.parts["block_top1"] = mean(2, 1);
    // A replay rewrites the graph's outputs: the diagnostics keep their own copy.
    SmithSums pool = entry.outputs;
    if (captures_) {
      pool.targets = pool.targets.clone();
      if (pool.pooled_real.defined()) pool.pooled_real = pool.pooled_real.clone();
    }
    objective.diagnostics = BlockPoolDiagnostics(pool);
  }
  if (captures_) objective.backward = CapturedBackward(scale);
  return objective;
}

struct CapturedContrastiveSteps::Entry {
  model::DocumentModel::PaddedBatch inputs;               // the bucket's padded pass, on the device
  torch::Tensor source_ids, target_ids, negative_ids;    // (b,), (b,), (h,) int64 corpus indices, on the device
  torch::Tensor scale;                                   // (1,) float64: the loss's
  torch::Tensor sums;                                    // (4,) float64 output: loss, top-1, reciprocal ranks, log-scale
  int64_t uses = 0;
#ifdef DOCMATCH_HAS_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

CapturedContrastiveSteps::CapturedContrastiveSteps(model::DocumentModel& model, model::Temperature temperature,
                                                   const torch::Device& device)
    : model_(model), temperature_(std::move(temperature)), device_(device), captures_(device.is_cuda()) {
  DOCMATCH_CHECK(model.takes_step_buckets(), "train", "a captured fine-tuning step pads its passes to step buckets; a ",
                 model.config().kind, " model takes none");
  cuda_ = GraphStreamFor(captures_, device);
}

CapturedContrastiveSteps::~CapturedContrastiveSteps() {
  if (captures_) {
    LOG(INFO) << "[finetune] CUDA graphs: " << graphs_ << " captured for " << entries_.size()
              << " step buckets and pair counts, " << replays_ << " micro-steps replayed";
  }
}

CapturedContrastiveSteps::Entry& CapturedContrastiveSteps::StaticInputs(const PreparedChunk& chunk, double scale) {
  const PairDocuments& documents = chunk.documents;
  model::DocumentModel::PaddedBatch fresh = model_.Pad(*chunk.batch, device_);
  const auto ids = [&](const std::vector<int64_t>& v) {
    return model::HostToDevice(v.data(), {static_cast<int64_t>(v.size())}, torch::kLong, device_, torch::kLong);
  };
  const torch::Tensor sources = ids(documents.sources), targets = ids(documents.targets),
                      negatives = ids(documents.negatives);
  const torch::Tensor fresh_scale = model::HostToDevice(&scale, {1}, torch::kFloat64, device_, torch::kFloat64);
  std::vector<int64_t> key = fresh.key;
  key.push_back(static_cast<int64_t>(documents.sources.size()));
  key.push_back(static_cast<int64_t>(documents.negatives.size()));
  std::unique_ptr<Entry>& slot = entries_[key];
  const bool first = slot == nullptr;
  if (first) {
    slot = std::make_unique<Entry>();
    slot->inputs.tensors.resize(fresh.tensors.size());
    slot->inputs.key = fresh.key;
  }
  for (size_t i = 0; i < fresh.tensors.size(); ++i) CopyStatic(slot->inputs.tensors[i], fresh.tensors[i], first);
  CopyStatic(slot->source_ids, sources, first);
  CopyStatic(slot->target_ids, targets, first);
  CopyStatic(slot->negative_ids, negatives, first);
  CopyStatic(slot->scale, fresh_scale, first);
  return *slot;
}

torch::Tensor CapturedContrastiveSteps::Body(Entry& entry, bool backward) {
  const torch::Tensor vectors = model_.EmbedPadded(entry.inputs).to(torch::kFloat);
  const int64_t b = entry.source_ids.size(0), h = entry.negative_ids.size(0);
  const ContrastivePairs pairs{vectors.narrow(0, 0, b), vectors.narrow(0, b, b),     entry.source_ids,
                               entry.target_ids,        vectors.narrow(0, 2 * b, h), entry.negative_ids};
  const ContrastiveTotals totals = ContrastiveSumsHere(pairs, temperature_);
  torch::Tensor loss = totals.loss * entry.scale[0].to(totals.loss.scalar_type());  // in the loss's type, as eagerly
  const torch::Tensor log_scale = temperature_.learned()
                                      ? temperature_.log_scale().detach().to(torch::kFloat64).reshape({})
                                      : torch::zeros({}, entry.scale.options());
  entry.sums = torch::stack({totals.loss.detach().to(torch::kFloat64).reshape({}),
                             totals.top1.to(torch::kFloat64).reshape({}),
                             totals.reciprocal_ranks.detach().to(torch::kFloat64).reshape({}), log_scale});
  if (!backward) return loss;
  const AutocastPaused paused(device_.type());
  loss.backward();
  return torch::Tensor();
}

Objective CapturedContrastiveSteps::Step(const PreparedChunk& chunk, double scale) {
  const double queries = 2.0 * static_cast<double>(chunk.documents.sources.size());
  Entry& entry = StaticInputs(chunk, 1.0 / queries * (captures_ ? scale : 1.0));
  torch::Tensor loss;
  if (captures_) {
#ifdef DOCMATCH_HAS_CUDA
    const bool captured = WarmUpCaptureOrReplay(
        *cuda_, entry.uses, /*warmup=*/1, entry.graph, [&] { Body(entry, /*backward=*/true); },
        [&] { entry.sums = torch::Tensor(); });
    if (entry.uses >= 1) ++replays_;
    if (captured) {
      ++graphs_;
      LOG(INFO) << "[finetune] CUDA graph " << graphs_ << " captured: " << entry.source_ids.size(0) << " pairs, "
                << entry.negative_ids.size(0) << " hard negatives, " << entry.inputs.tensors[0].numel()
                << " token slots";
    }
#endif
  } else {
    loss = Body(entry, /*backward=*/false);
  }
  ++entry.uses;
  const torch::Tensor sums = entry.sums.to(torch::kCPU);  // the step's one host sync
  const double* sum = sums.data_ptr<double>();
  Objective objective =
      ContrastiveReport(sum[0] / queries, sum[1] / queries, sum[2] / queries,
                        temperature_.learned() ? std::optional<double>(sum[3]) : std::nullopt);
  objective.loss = loss;
  if (captures_) objective.backward = CapturedBackward(scale);
  return objective;
}

struct CapturedOptimizerStep::Graph {
#ifdef DOCMATCH_HAS_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

CapturedOptimizerStep::CapturedOptimizerStep(FusedAdamW& optimizer, std::vector<torch::Tensor> clipped,
                                             std::vector<torch::Tensor> trained, const torch::Device& device,
                                             Options options)
    : optimizer_(optimizer),
      clipped_(std::move(clipped)),
      trained_(std::move(trained)),
      options_(options),
      captures_(options.capture && device.is_cuda()),
      graph_(std::make_unique<Graph>()) {
  DOCMATCH_CHECK(options.warmup_steps >= 1, "train",
                 "a captured update needs at least one eager update first (it makes the optimizer capturable), not ",
                 options.warmup_steps);
  cuda_ = GraphStreamFor(captures_, device);
}

CapturedOptimizerStep::~CapturedOptimizerStep() {
  if (captures_) LOG(INFO) << "[train] CUDA graphs: the update captured, " << replays_ << " updates replayed";
}

torch::Tensor CapturedOptimizerStep::Body() {
  torch::Tensor norm = options_.max_grad_norm > 0 ? ClipGradientNorm(clipped_, options_.max_grad_norm)
                                                  : GradientNorm(clipped_);
  optimizer_.step();
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : trained_)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::_foreach_zero_(grads);
  return norm;
}

torch::Tensor CapturedOptimizerStep::Step() {
  // Which parameters have a gradient, and where (host reads, no sync): the
  // same at every update, for the graph reads and zeroes those tensors and
  // the optimizer steps exactly those parameters.
  std::vector<const void*> gradients;
  for (const torch::Tensor& p : trained_) gradients.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
  if (!optimizer_.capturable()) {
    optimizer_.MakeCapturable();  // the first update: the gradients exist now
    gradients_ = gradients;
  }
  TORCH_CHECK(gradients == gradients_, "a captured update steps the parameters that had a gradient at the first "
              "update, and zeroes those gradients in place: since then a parameter's gradient was made, dropped or "
              "replaced");
  ++updates_;
  if (!captures_) return Body();
#ifdef DOCMATCH_HAS_CUDA
  const bool captured = WarmUpCaptureOrReplay(
      *cuda_, updates_ - 1, options_.warmup_steps, graph_->graph, [&] { norm_ = Body(); },
      [&] { norm_ = torch::Tensor(); });
  if (updates_ > options_.warmup_steps) ++replays_;
  if (captured) LOG(INFO) << "[train] CUDA graph captured: the update (clipping, AdamW, gradients zeroed)";
  return norm_.clone();  // the next replay rewrites norm_
#else
  return torch::Tensor();
#endif
}

void CapturedOptimizerStep::SyncHostSteps() {
  if (optimizer_.capturable()) optimizer_.SyncHostSteps();
}

}  // namespace docmatch::train
