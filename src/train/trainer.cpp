// The pre-training loop: batches from BatchLoader, the objective, gradient sync,
// validation, checkpoints and resume (trainer.h).
#include "train/trainer.h"

#include <glog/logging.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "console/progress.h"
#include "data/batches/batch_loader.h"
#include "data/batches/blocks.h"
#include "data/batches/docsplit.h"
#include "data/batches/flat_batch.h"
#include "data/batches/sdr_batch.h"
#include "data/text/tokenizer.h"
#include "dist/gradient_synchronizer.h"
#include "model/config.h"
#include "model/match_bert.h"
#include "model/sdr.h"
#include "model/smith.h"
#include "train/objectives.h"
#include "train/training_run.h"

namespace docmatch::train {
namespace {

nlohmann::json OptionsJson(const PretrainOptions& o) {
  nlohmann::json json = LoopOptionsJson(o);
  json.update({{"corpus", o.corpus},
               {"model", o.model},
               {"init", o.init},
               {"objective", o.objective},
               {"temperature", o.temperature},
               {"lm_weight", o.lm_weight},
               {"detach_block_targets", o.detach_block_targets},
               {"grad_cache", o.grad_cache},
               {"valid_corpus", o.valid_corpus},
               {"valid_documents", o.valid_documents}});
  return json;
}

// One objective's model and batches, for the shared loop below.
template <typename Batch>
struct Task {
  torch::nn::Module& module;
  typename data::BatchLoader<Batch>::Builder builder;
  std::function<Objective(const Batch&)> compute;
  std::function<int64_t(const Batch&)> documents;  // documents this rank's batch covers
  std::function<int64_t(const Batch&)> tokens;     // real tokens in this rank's batch
  std::function<double(const Batch&)> flops;       // model FLOPs of a step on it; null: not counted
  io::ModelFolderInfo info;                        // how checkpoints describe the model
};

// A rank's batch as the objective reads it: its documents in chunks of
// --grad-cache (one chunk without gradient caching).
template <typename Batch>
struct Chunks {
  std::vector<Batch> chunks;
  std::vector<int64_t> document_index;  // every chunk's, in order

  int64_t Sum(const std::function<int64_t(const Batch&)>& count) const {
    int64_t total = 0;
    for (const Batch& c : chunks) total += count(c);
    return total;
  }
};

// A builder of Chunks: `build` on each run of `size` documents (0: all at once).
template <typename Batch>
typename data::BatchLoader<Chunks<Batch>>::Builder InChunks(
    int64_t size, std::function<Batch(const std::vector<const data::Document*>&, int64_t)> build) {
  return [size, build](const std::vector<const data::Document*>& docs, int64_t epoch) {
    Chunks<Batch> out;
    const size_t step = size > 0 ? static_cast<size_t>(size) : docs.size();
    for (size_t begin = 0; begin < docs.size(); begin += step) {
      const std::vector<const data::Document*> part(docs.begin() + begin,
                                                    docs.begin() + std::min(docs.size(), begin + step));
      out.chunks.push_back(build(part, epoch));
      const std::vector<int64_t>& index = out.chunks.back().document_index;
      out.document_index.insert(out.document_index.end(), index.begin(), index.end());
    }
    return out;
  };
}

// This rank's validation batches: global batches of world x batch_size
// documents taken in corpus order from the validation corpus (rank r the r-th
// slice of each, so in-batch negatives span every rank as in training), with
// epoch 0's masks. Built once; every validation scores the same batches.
template <typename Batch>
std::vector<Batch> ValidationBatches(const Task<Batch>& task, const data::Corpus& valid, const PretrainOptions& options,
                                     const dist::ProcessGroup& group) {
  const int64_t global = options.batch_size * group.size();
  const int64_t count = std::min(options.valid_documents, valid.num_documents()) / global;
  TORCH_CHECK(count > 0, "[train] validation reads ", std::min(options.valid_documents, valid.num_documents()),
              " documents of ", options.valid_corpus, ", fewer than one global batch of ", global,
              " (ranks x --batch-size): raise --valid-documents or use a larger validation corpus");
  std::vector<Batch> batches;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<data::Document> documents;
    for (int64_t i = 0; i < options.batch_size; ++i)
      documents.push_back(valid.Get(b * global + group.rank() * options.batch_size + i));
    std::vector<const data::Document*> pointers;
    for (const data::Document& d : documents) pointers.push_back(&d);
    batches.push_back(task.builder(pointers, /*epoch=*/0));
  }
  return batches;
}

// The validation loss: the mean objective over `batches`, dropout off.
template <typename Batch>
double Validate(Task<Batch>& task, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  task.module.eval();
  double total = 0;
  for (const Batch& batch : batches) total += task.compute(batch).value;
  task.module.train();
  return total / static_cast<double>(batches.size());
}

// The pre-training loop of one objective. The constructor sets the run up
// (or resumes it); Run() takes the steps, each a sequence of named phases.
template <typename Batch>
class PretrainingLoop {
 public:
  PretrainingLoop(const PretrainOptions& options, std::shared_ptr<const data::Corpus> corpus, Task<Batch> task,
                  dist::ProcessGroup& group);
  LoopResult Run();

 private:
  // A step's objective, and the documents its batches held on all ranks.
  struct StepLosses : StepObjective {
    int64_t documents = 0;
  };

  Batch NextBatch();                // this rank's next batch; at the end of its epoch, the next epoch's first
  StepLosses ForwardBackward();     // the step's micro-steps, gradients accumulated
  void Update(bool finite);         // gradients averaged, clipped and applied; dropped after a non-finite loss
  void Report(StepLosses& losses);  // the progress bar; every --log-every steps the metrics
  void ValidateWhenDue();           // the validation loss, the best model and early stopping
  void CheckpointWhenDue();         // at every --checkpoint-every, the last step, a stop or an interruption
  std::unique_ptr<data::BatchLoader<Batch>> MakeLoader() const {
    return std::make_unique<data::BatchLoader<Batch>>(stream_, options_.batch_size, task_.builder, /*prefetch=*/4,
                                                      /*drop_last=*/true, options_.loader_threads);
  }

  const PretrainOptions& options_;
  const std::shared_ptr<const data::Corpus> corpus_;
  Task<Batch> task_;
  dist::ProcessGroup& group_;
  const torch::Device device_;
  dist::GradientSynchronizer synchronizer_;
  SentenceLevel levels_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  TrainingRun run_;
  std::vector<Batch> valid_batches_;
  BestModel best_;
  int64_t validate_every_;
  int64_t step_ = 0;
  std::shared_ptr<data::ShardStream> stream_;
  std::unique_ptr<data::BatchLoader<Batch>> loader_;
  // Their clocks start with the first step.
  std::optional<console::ProgressBar> bar_;
  std::optional<PhaseTimer> timer_;
  std::optional<StepProfiler> profiler_;
  int64_t tokens_ = 0, documents_ = 0;  // this process's count, all ranks' (ranks hold batches of similar size)
  double flops_ = 0;                    // this rank's model FLOPs since the last log
  // Throughput over the last log interval (not since the start, so that a
  // warm-up or a slow validation does not blur the steady rate).
  int64_t logged_tokens_ = 0, logged_documents_ = 0, timed_from_ = 0;
  double logged_seconds_ = 0;
  LoopResult result_;
};

template <typename Batch>
PretrainingLoop<Batch>::PretrainingLoop(const PretrainOptions& options, std::shared_ptr<const data::Corpus> corpus,
                                        Task<Batch> task, dist::ProcessGroup& group)
    : options_(options),
      corpus_(std::move(corpus)),
      task_(std::move(task)),
      group_(group),
      device_(group.device()),
      synchronizer_(task_.module.parameters(), group, TrainingRun::Synchronizer(options)),
      levels_(options, task_.info.config.kind, "train"),
      optimizer_(levels_.MakeOptimizer(task_.module, options.optimizer)),
      run_(options.run, options.keep_last, group),
      best_(options.run, options.patience),
      // With a validation corpus and no interval, validate at every checkpoint.
      validate_every_(options.validate_every > 0 ? options.validate_every : options.checkpoint_every) {
  const int rank = group.rank();
  synchronizer_.BroadcastParameters();
  run_.set_console_lines(!options.progress);
  if (!options.valid_corpus.empty()) {
    const data::Corpus valid(options.valid_corpus);
    TORCH_CHECK(valid.manifest().tokenizer_hash == corpus_->manifest().tokenizer_hash, "[train] ", options.valid_corpus,
                " was prepared with another tokenizer than ", options.corpus, ": prepare it with --tokenizer ",
                corpus_->tokenizer_path());
    valid_batches_ = ValidationBatches(task_, valid, options, group);
  }

  // Dropout draws: a per-rank stream, saved and restored with checkpoints.
  torch::manual_seed(options.seed + 1 + static_cast<uint64_t>(rank));
  const std::optional<ResumedState> resumed = run_.Resume(options.resume, task_.module, *optimizer_, task_.info);
  run_.RecordConfig(options.config_yaml, resumed.has_value());
  step_ = resumed ? resumed->step : 0;
  if (resumed) best_.Restore(resumed->trainer);

  data::StreamOptions stream_options;
  stream_options.seed = options.seed;
  stream_options.rank = rank;
  stream_options.world_size = group.size();
  stream_ = std::make_shared<data::ShardStream>(corpus_, stream_options);
  stream_->StartEpoch(resumed ? resumed->epoch : 0, std::min(resumed ? resumed->position : 0, stream_->epoch_size()));
  TORCH_CHECK(stream_->epoch_size() >= options.batch_size, "[train] rank ", rank, " gets ", stream_->epoch_size(),
              " documents per epoch, fewer than one batch of ", options.batch_size,
              ": use a smaller --batch-size or fewer ranks");
  loader_ = MakeLoader();
}

template <typename Batch>
LoopResult PretrainingLoop<Batch>::Run() {
  bar_.emplace("[train] step", options_.steps, "steps", "docs", group_.rank() == 0 && options_.progress);
  bar_->Resume(step_);
  timer_.emplace(options_.time_split, device_);
  profiler_.emplace(options_, "train", group_.rank(), /*start_step=*/step_, device_);
  timed_from_ = step_;
  while (step_ < options_.steps && !result_.stopped_early && !result_.interrupted) {
    profiler_->Begin(step_ + 1);
    levels_.BeginStep(step_);
    StepLosses losses = ForwardBackward();
    Update(losses.finite);
    ++step_;
    Report(losses);
    ValidateWhenDue();
    result_.interrupted = run_.StopRequested(step_);
    CheckpointWhenDue();
    timer_->Mark("other");  // progress, logging, validation, checkpoints
    profiler_->End(step_);
  }
  bar_->Finish();
  result_.step = step_;
  result_.best_step = best_.best_step();
  result_.best_valid_loss = best_.best_loss();
  return result_;
}

template <typename Batch>
Batch PretrainingLoop<Batch>::NextBatch() {
  std::optional<Batch> batch = loader_->Next();
  if (!batch) {
    stream_->StartEpoch(stream_->epoch() + 1);
    loader_ = MakeLoader();
    batch = loader_->Next();
  }
  return std::move(*batch);
}

template <typename Batch>
typename PretrainingLoop<Batch>::StepLosses PretrainingLoop<Batch>::ForwardBackward() {
  StepLosses losses;
  const int64_t world = group_.size();
  for (int64_t micro = 0; micro < options_.accumulation; ++micro) {
    const Batch batch = NextBatch();
    timer_->Mark("data");
    std::optional<Objective> computed;
    {
      const Autocast autocast(device_, options_.precision);
      computed = task_.compute(batch);
    }
    const Objective& objective = *computed;
    // After a non-finite micro-step the step is dropped: the rest are not checked.
    const bool usable = losses.finite && TrainingRun::CheckFinite(objective.value, step_, options_.on_nonfinite,
                                                                  *corpus_, batch.document_index);
    timer_->Mark("forward");
    const bool last_micro = micro + 1 == options_.accumulation;
    Backward(objective, 1.0 / static_cast<double>(options_.accumulation),
             [&](bool last) { synchronizer_.Prepare(/*sync=*/last_micro && last); });
    timer_->Mark("backward");
    losses.Add(objective, options_.accumulation, usable);
    losses.documents += task_.documents(batch) * world;
    tokens_ += task_.tokens(batch) * world;
    if (task_.flops) flops_ += task_.flops(batch);
  }
  return losses;
}

template <typename Batch>
void PretrainingLoop<Batch>::Update(bool finite) {
  if (finite) {
    TrainingRun::Step(synchronizer_, task_.module, *optimizer_, options_.optimizer, step_, &*timer_,
                      levels_.LrFactors(step_), levels_.Frozen(step_));
  } else {
    TrainingRun::SkipStep(synchronizer_, *optimizer_);
  }
}

template <typename Batch>
void PretrainingLoop<Batch>::Report(StepLosses& losses) {
  bar_->SetStatus("loss " + std::to_string(losses.value).substr(0, 6) + "  " +
                  console::HumanCount(tokens_ / bar_->seconds()) + " tokens/s");
  bar_->Add(1, losses.documents);
  documents_ += losses.documents;
  if (!TrainingRun::LogDue(options_, step_)) return;
  std::map<std::string, double>& parts = losses.parts;
  if (losses.diagnostics) parts.merge(losses.diagnostics());
  parts["loss"] = losses.value;
  parts["lr"] = LearningRate(options_.optimizer, step_ - 1);
  parts["epoch"] = static_cast<double>(stream_->epoch());
  const double interval = std::max(1e-9, bar_->seconds() - logged_seconds_);
  parts["docs_per_s"] = static_cast<double>(documents_ - logged_documents_) / interval;
  parts["tokens_per_s"] = static_cast<double>(tokens_ - logged_tokens_) / interval;
  logged_seconds_ = bar_->seconds();
  logged_documents_ = documents_;
  logged_tokens_ = tokens_;
  if (device_.is_cuda()) parts["gpu_peak_gib"] = PeakDeviceMemoryGiB(device_);
  std::map<std::string, double> times = timer_->Take(step_ - timed_from_);
  if (times.count("time/step_ms") && task_.flops) {  // this rank's achieved model FLOP rate
    parts["model_tflops_per_s"] = flops_ / (times["time/step_ms"] * (step_ - timed_from_) * 1e-3) / 1e12;
  }
  flops_ = 0;
  parts.merge(times);
  timed_from_ = step_;
  run_.Log(step_, "train", parts);
}

template <typename Batch>
void PretrainingLoop<Batch>::ValidateWhenDue() {
  if (valid_batches_.empty() || (step_ % validate_every_ != 0 && step_ != options_.steps)) return;
  double loss = 0;
  {
    const Autocast autocast(device_, options_.precision);  // validated as trained
    loss = Validate(task_, valid_batches_);
  }
  run_.Log(step_, "valid", {{"loss", loss}});
  result_.stopped_early = best_.Update(loss, step_, task_.module, task_.info, group_);
}

template <typename Batch>
void PretrainingLoop<Batch>::CheckpointWhenDue() {
  if (!TrainingRun::CheckpointDue(options_, step_, result_)) return;
  const data::StreamCursor now = loader_->cursor();
  nlohmann::json trainer = {{"options", OptionsJson(options_)}, {"validation", best_.ToJson()}};
  levels_.Save(&trainer);
  run_.Save(step_, now.epoch, now.position, task_.module, *optimizer_, task_.info, trainer);
}

template <typename Batch>
LoopResult Loop(const PretrainOptions& options, const std::shared_ptr<const data::Corpus>& corpus, Task<Batch> task,
                dist::ProcessGroup& group) {
  return PretrainingLoop<Batch>(options, corpus, std::move(task), group).Run();
}

// The kind an objective trains, or a message saying which kinds it takes.
void CheckKind(const std::string& objective, const std::string& kind, const std::string& source) {
  const bool ok = objective == "sdr"     ? kind == "sdr"
                  : objective == "wp+sp" ? kind == "smith"
                                         : kind == "smith" || kind == "match_bert";  // wp, docsplit
  const std::string kinds = objective == "sdr"     ? "'sdr'"
                            : objective == "wp+sp" ? "'smith' (sentence blocks)"
                                                   : "'smith' or 'match_bert'";
  TORCH_CHECK(ok, "[train] objective ", objective, " trains a ", kinds, " model; ", source, " is kind '", kind, "'");
}

// The starting weights of `init` into the pre-training module `whole` (whose
// encoder is `encoder`): a pre-training checkpoint holds the whole module,
// any other folder the encoder alone.
void LoadInit(const std::string& init, const io::ModelFolderInfo& info, torch::nn::Module& whole,
              torch::nn::Module& encoder, int rank) {
  if (init.empty()) return;
  if (!info.prefix.empty() && info.stage == "pretrain") {
    io::ModelFolderInfo all = info;
    all.prefix = "";
    io::LoadFolderWeights(whole, init, all);
  } else {
    io::LoadFolderWeights(encoder, init, info);
  }
  if (rank == 0) {
    LOG(INFO) << "[train] weights from " << init << " (" << (info.stage.empty() ? "model folder" : info.stage)
              << (!info.prefix.empty() && info.stage == "pretrain" ? ", heads included" : ", heads fresh")
              << "); optimizer fresh";
  }
}

}  // namespace

LoopResult RunPretraining(const PretrainOptions& options, dist::ProcessGroup& group) {
  const int rank = group.rank(), world = group.size();
  const torch::Device device = group.device();
  const std::string& objective = options.objective;
  TORCH_CHECK(objective == "wp" || objective == "wp+sp" || objective == "docsplit" || objective == "sdr",
              "[train] unknown objective '", objective, "' (wp, wp+sp, docsplit, sdr)");
  TORCH_CHECK(options.init.empty() || options.model.empty(), "[train] give --model-config (random weights) or --init ",
              "(the model and weights of a folder), not both: --init ", options.init, " brings its own model");
  auto corpus = std::make_shared<const data::Corpus>(options.corpus);
  const TrainingRun::ModelSource source =
      TrainingRun::SourceOfModel(options.run, options.resume, options.init, "train", rank);
  const std::string init = source.resuming ? "" : options.init;  // weights to load before step 1
  io::ModelFolderInfo init_info;
  model::ModelConfig config;
  if (!source.folder.empty()) {
    const std::string& from = source.folder;
    init_info = io::ReadModelFolderInfo(from);
    io::CheckTokenizer(init_info, *corpus, from);
    config = init_info.config;
    CheckKind(objective, config.kind, from);
  } else {
    const std::string yaml = options.model.empty() ? PretrainOptions::kDefaultModel : options.model;
    config = model::LoadModelConfig(yaml);
    model::SetVocabSize(&config, corpus->manifest().vocab_size);
    CheckKind(objective, config.kind, yaml);
  }
  TORCH_CHECK(options.temperature > 0, "[train] --temperature must be positive, not ", options.temperature);
  TORCH_CHECK(options.grad_cache >= 0, "[train] --grad-cache must be 0 (off) or a number of documents, not ",
              options.grad_cache);
  TORCH_CHECK(options.grad_cache == 0 || objective == "docsplit", "[train] --grad-cache applies to docsplit, whose ",
              "in-batch negatives make the batch one loss; for ", objective, " use --accumulation");
  TORCH_CHECK(!options.detach_block_targets || objective == "wp+sp",
              "[train] --detach-block-targets applies to wp+sp, the objective with masked sentence blocks; not to ",
              objective);
  io::ModelFolderInfo info;
  info.config = config;
  info.stage = "pretrain";
  io::TrainedTokenizer(*corpus, &info);

  const data::MaskOptions masks =
      data::PretrainingMasks(corpus->manifest().vocab_size, options.seed, /*sentence_blocks=*/objective == "wp+sp");
  UseDeterministicAlgorithms(options.deterministic);
  torch::manual_seed(options.seed);  // the same initial weights on every rank
  const bool docsplit = objective == "docsplit";
  // DocSplit without its LM term reads its views unmasked.
  const bool word_masks = !docsplit || options.lm_weight != 0;
  const int64_t chunk = docsplit ? options.grad_cache : 0;  // documents per chunk; 0: the whole batch

  if (objective == "sdr") {
    model::SentenceEncoder model(config.sdr);
    LoadInit(init, init_info, *model, *model, rank);
    model->to(device);
    data::SdrOptions sdr{config.sdr.max_tokens, 0.5, options.seed, config.sdr.separator};
    const int64_t offset = rank * options.batch_size, global = world * options.batch_size;
    Task<data::SdrBatch> task{
        *model,
        [=](const std::vector<const data::Document*>& docs, int64_t epoch) {
          return data::BuildSdrBatch(docs, sdr, &masks, epoch, offset, global);
        },
        [&](const data::SdrBatch& batch) { return Sdr(model, model::ToTensors(batch, device), group); },
        [](const data::SdrBatch& batch) { return batch.B; },
        [](const data::SdrBatch& batch) {
          return static_cast<int64_t>(
              std::count_if(batch.anchors.begin(), batch.anchors.end(), [](int32_t t) { return t != data::kPadId; }) +
              std::count_if(batch.partners.begin(), batch.partners.end(), [](int32_t t) { return t != data::kPadId; }));
        },
        nullptr,
        info};
    return Loop(options, corpus, std::move(task), group);
  }

  if (config.kind == "match_bert") {
    model::FlatPretraining model(model::FlatEncoder(config.match_bert), config.match_bert);
    LoadInit(init, init_info, *model, *model->encoder, rank);
    model->to(device);
    info.prefix = "encoder.";
    const data::FlatOptions flat = config.match_bert.Flat();
    using Batch = Chunks<data::FlatBatch>;
    Task<Batch> task{
        *model,
        InChunks<data::FlatBatch>(chunk,
                                  [=](const std::vector<const data::Document*>& docs, int64_t epoch) {
                                    if (docsplit)
                                      return data::BuildFlatDocSplitBatch(docs, flat, word_masks ? &masks : nullptr,
                                                                          options.seed, epoch);
                                    return data::BuildFlatBatch(docs, flat, masks, epoch);
                                  }),
        [&](const Batch& batch) {
          return docsplit ? DocSplit(model, batch.chunks, group, options.temperature, options.lm_weight)
                          : WordLm(model, batch.chunks.front(), group);
        },
        [=](const Batch& batch) {
          return batch.Sum([](const data::FlatBatch& b) { return b.documents; }) / (docsplit ? 2 : 1);
        },
        [](const Batch& batch) { return batch.Sum([](const data::FlatBatch& b) { return b.real_tokens; }); },
        nullptr,
        info};
    return Loop(options, corpus, std::move(task), group);
  }

  model::SmithPretraining model(model::SmithEncoder(config.smith), config.smith);
  LoadInit(init, init_info, *model, *model->encoder, rank);
  model->to(device);
  info.prefix = "encoder.";
  const data::BlockOptions blocks = config.smith.Blocks();
  using Batch = Chunks<data::BlockBatch>;
  Task<Batch> task{
      *model,
      InChunks<data::BlockBatch>(chunk,
                                 [=](const std::vector<const data::Document*>& docs, int64_t epoch) {
                                   if (!docsplit) return data::BuildBlockBatch(docs, blocks, &masks, epoch);
                                   return data::BuildDocSplitBatch(docs, blocks, word_masks ? &masks : nullptr,
                                                                   options.seed, epoch);
                                 }),
      [&](const Batch& batch) {
        if (docsplit) return DocSplit(model, batch.chunks, group, options.temperature, options.lm_weight);
        return SmithPretraining(model, model::ToTensors(batch.chunks.front(), device), objective == "wp+sp", group,
                                options.detach_block_targets);
      },
      [=](const Batch& batch) { return batch.Sum([](const data::BlockBatch& b) { return b.B; }) / (docsplit ? 2 : 1); },
      [](const Batch& batch) { return batch.Sum([](const data::BlockBatch& b) { return b.real_tokens; }); },
      [=](const Batch& batch) {
        // WP never runs the document transformer; WP+SP and DocSplit do
        // (DocSplit has no masked blocks, so no block scores). Gradient
        // caching's extra forward is not model work and is not counted.
        double total = 0;
        for (const data::BlockBatch& b : batch.chunks)
          total += model::SmithPretrainingFlops(config.smith, b, objective != "wp");
        return total;
      },
      info};
  return Loop(options, corpus, std::move(task), group);
}

}  // namespace docmatch::train
