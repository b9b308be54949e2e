// Pre-training as a stage of the training loop (training_loop.h): each kind's
// model, batches from BatchLoader and the objective of PretrainObjectives(),
// and the validation batches (trainer.h).
#include "train/trainer.h"

#include <glog/logging.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "console/error.h"
#include "data/batches/batch_loader.h"
#include "data/batches/blocks.h"
#include "data/batches/docsplit.h"
#include "data/batches/flat_batch.h"
#include "data/batches/sdr_batch.h"
#include "data/text/tokenizer.h"
#include "model/config.h"
#include "model/match_bert.h"
#include "model/sdr.h"
#include "model/smith.h"
#include "model/transformer.h"
#include "train/captured_step.h"
#include "train/objectives.h"
#include "train/pretraining_objectives.h"
#include "train/training_loop.h"
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
               {"step_buckets", o.step_buckets},
               {"cuda_graphs", o.cuda_graphs},
               {"valid_corpus", o.valid_corpus},
               {"valid_documents", o.valid_documents}});
  return json;
}

// One objective's model and batches, for the PretrainingStage below.
template <typename Batch>
struct Task {
  torch::nn::Module& module;
  typename data::BatchLoader<Batch>::Builder builder;
  std::function<Objective(const Batch&)> compute;
  std::function<int64_t(const Batch&)> documents;  // documents this rank's batch covers
  std::function<int64_t(const Batch&)> tokens;     // real tokens in this rank's batch
  std::function<double(const Batch&)> flops;       // model FLOPs of a step on it; null: not counted
  io::ModelFolderInfo info;                        // how checkpoints describe the model
  bool captures_steps = false;                     // TrainingStage::CapturesSteps
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
  DOCMATCH_CHECK(count > 0, "train", "validation reads ", std::min(options.valid_documents, valid.num_documents()),
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
double ValidationLoss(Task<Batch>& task, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  task.module.eval();
  double total = 0;
  for (const Batch& batch : batches) total += task.compute(batch).value;
  task.module.train();
  return total / static_cast<double>(batches.size());
}

// Pre-training of one objective as a stage of the training loop
// (training_loop.h): this rank's share of the corpus streamed in batches,
// the task's objective, and the validation batches.
template <typename Batch>
class PretrainingStage : public TrainingStage {
 public:
  PretrainingStage(const PretrainOptions& options, std::shared_ptr<const data::Corpus> corpus, Task<Batch> task,
                   const dist::ProcessGroup& group);

  const char* name() const override { return "train"; }
  const char* unit() const override { return "docs"; }
  torch::nn::Module& module() override { return task_.module; }
  bool CapturesSteps() const override { return task_.captures_steps; }
  const io::ModelFolderInfo& info() const override { return task_.info; }
  const data::Corpus& corpus() const override { return *corpus_; }
  void Start(const std::optional<ResumedState>& resumed) override;
  void NextBatch() override;
  Objective Compute() override { return task_.compute(*batch_); }
  BatchCounts Counts() const override;
  const std::vector<int64_t>& BatchDocuments() const override { return batch_->document_index; }
  void DropBatch() override { batch_.reset(); }
  int64_t epoch() const override { return stream_->epoch(); }
  double epoch_progress() const override {
    const data::StreamCursor now = loader_->cursor();
    return static_cast<double>(now.epoch) +
           static_cast<double>(now.position) / static_cast<double>(std::max<int64_t>(1, stream_->epoch_size()));
  }
  // With a validation corpus and no interval, validate at every checkpoint.
  int64_t validate_every() const override {
    if (valid_batches_.empty()) return 0;
    return options_.validate_every > 0 ? options_.validate_every : options_.checkpoint_every;
  }
  std::map<std::string, double> Validate() override { return {{"loss", ValidationLoss(task_, valid_batches_)}}; }
  DataPosition Position() const override {
    const data::StreamCursor now = loader_->cursor();
    return {now.epoch, now.position};
  }
  void Save(nlohmann::json* trainer) const override { (*trainer)["options"] = OptionsJson(options_); }

 private:
  std::unique_ptr<data::BatchLoader<Batch>> MakeLoader() const {
    return std::make_unique<data::BatchLoader<Batch>>(stream_, options_.batch_size, task_.builder, /*prefetch=*/4,
                                                      /*drop_last=*/true, options_.loader_threads);
  }

  const PretrainOptions& options_;
  const std::shared_ptr<const data::Corpus> corpus_;
  Task<Batch> task_;
  const int rank_, world_;
  std::vector<Batch> valid_batches_;
  std::shared_ptr<data::ShardStream> stream_;
  std::unique_ptr<data::BatchLoader<Batch>> loader_;
  std::optional<Batch> batch_;  // the micro-batch taken
};

template <typename Batch>
PretrainingStage<Batch>::PretrainingStage(const PretrainOptions& options, std::shared_ptr<const data::Corpus> corpus,
                                          Task<Batch> task, const dist::ProcessGroup& group)
    : options_(options), corpus_(std::move(corpus)), task_(std::move(task)), rank_(group.rank()), world_(group.size()) {
  if (!options.valid_corpus.empty()) {
    const data::Corpus valid(options.valid_corpus);
    DOCMATCH_CHECK(valid.manifest().tokenizer_hash == corpus_->manifest().tokenizer_hash, "train", options.valid_corpus,
                   " was prepared with another tokenizer than ", options.corpus, ": prepare it with --tokenizer ",
                   corpus_->tokenizer_path());
    valid_batches_ = ValidationBatches(task_, valid, options, group);
  }
}

template <typename Batch>
void PretrainingStage<Batch>::Start(const std::optional<ResumedState>& resumed) {
  data::StreamOptions stream_options;
  stream_options.seed = options_.seed;
  stream_options.rank = rank_;
  stream_options.world_size = world_;
  stream_ = std::make_shared<data::ShardStream>(corpus_, stream_options);
  stream_->StartEpoch(resumed ? resumed->epoch : 0, std::min(resumed ? resumed->position : 0, stream_->epoch_size()));
  DOCMATCH_CHECK(stream_->epoch_size() >= options_.batch_size, "train", "rank ", rank_, " gets ", stream_->epoch_size(),
                 " documents per epoch, fewer than one batch of ", options_.batch_size,
                 ": use a smaller --batch-size or fewer ranks");
  loader_ = MakeLoader();
}

// This rank's next batch; at the end of its epoch, the next epoch's first.
template <typename Batch>
void PretrainingStage<Batch>::NextBatch() {
  batch_ = loader_->Next();
  if (!batch_) {
    stream_->StartEpoch(stream_->epoch() + 1);
    loader_ = MakeLoader();
    batch_ = loader_->Next();
  }
}

template <typename Batch>
BatchCounts PretrainingStage<Batch>::Counts() const {
  const int64_t documents = task_.documents(*batch_) * world_;
  return {documents, documents, task_.tokens(*batch_) * world_, task_.flops ? task_.flops(*batch_) : 0.0};
}

template <typename Batch>
LoopResult Loop(const PretrainOptions& options, const std::shared_ptr<const data::Corpus>& corpus, Task<Batch> task,
                dist::ProcessGroup& group) {
  PretrainingStage<Batch> stage(options, corpus, std::move(task), group);
  return RunTrainingLoop(stage, options, group);
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

// What every kind's pre-training starts from, set up once by RunPretraining.
struct PretrainSetup {
  const PretrainOptions& options;
  const PretrainObjectiveInfo& objective;
  std::shared_ptr<const data::Corpus> corpus;
  const model::ModelConfig& config;
  io::ModelFolderInfo info;       // how checkpoints describe the model
  std::string init;               // a folder whose weights load before step 1; "" = none
  io::ModelFolderInfo init_info;  // its description
  data::MaskOptions masks;
  int64_t chunk;    // documents per gradient-caching chunk; 0: the whole batch
  bool word_masks;  // the views are masked (DocSplit without its LM term reads them unmasked)
  dist::ProcessGroup& group;
};

// SDR's sentence encoder on the sdr objective.
LoopResult PretrainSdr(PretrainSetup& s) {
  const model::ModelConfig& config = s.config;
  const torch::Device device = s.group.device();
  model::SentenceEncoder model(config.sdr);
  LoadInit(s.init, s.init_info, *model, *model, s.group.rank());
  model->to(device);
  const data::SdrOptions sdr{config.sdr.max_tokens, 0.5, s.options.seed, config.sdr.separator};
  const int64_t offset = s.group.rank() * s.options.batch_size, global = s.group.size() * s.options.batch_size;
  const data::MaskOptions masks = s.masks;
  dist::ProcessGroup& group = s.group;
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
      s.info,
      /*captures_steps=*/false};
  return Loop(s.options, s.corpus, std::move(task), group);
}

// MatchBERT's flat encoder on wp or docsplit.
LoopResult PretrainFlat(PretrainSetup& s) {
  const model::ModelConfig& config = s.config;
  model::FlatPretraining model(model::FlatEncoder(config.match_bert), config.match_bert);
  LoadInit(s.init, s.init_info, *model, *model->encoder, s.group.rank());
  model->to(s.group.device());
  s.info.prefix = "encoder.";
  const data::FlatOptions flat = config.match_bert.Flat();
  const bool docsplit = s.objective.id == PretrainObjective::kDocSplit;
  const data::MaskOptions masks = s.masks;
  const bool word_masks = s.word_masks;
  const uint64_t seed = s.options.seed;
  const double temperature = s.options.temperature, lm_weight = s.options.lm_weight;
  dist::ProcessGroup& group = s.group;
  using Batch = Chunks<data::FlatBatch>;
  Task<Batch> task{*model,
                   InChunks<data::FlatBatch>(s.chunk,
                                             [=](const std::vector<const data::Document*>& docs, int64_t epoch) {
                                               if (docsplit)
                                                 return data::BuildFlatDocSplitBatch(
                                                     docs, flat, word_masks ? &masks : nullptr, seed, epoch);
                                               return data::BuildFlatBatch(docs, flat, masks, epoch);
                                             }),
                   [&](const Batch& batch) {
                     return docsplit ? DocSplit(model, batch.chunks, group, temperature, lm_weight)
                                     : WordLm(model, batch.chunks.front(), group);
                   },
                   [=](const Batch& batch) {
                     return batch.Sum([](const data::FlatBatch& b) { return b.documents; }) / (docsplit ? 2 : 1);
                   },
                   [](const Batch& batch) { return batch.Sum([](const data::FlatBatch& b) { return b.real_tokens; }); },
                   nullptr,
                   s.info,
                   /*captures_steps=*/false};
  return Loop(s.options, s.corpus, std::move(task), group);
}

// SMITH's hierarchical encoder on wp, wp+sp or docsplit.
LoopResult PretrainSmith(PretrainSetup& s) {
  const model::ModelConfig& config = s.config;
  const torch::Device device = s.group.device();
  model::SmithPretraining model(model::SmithEncoder(config.smith), config.smith);
  LoadInit(s.init, s.init_info, *model, *model->encoder, s.group.rank());
  model->to(device);
  model::UsePackedAttention(*model, model::ParsePackedAttention(s.options.attention));
  s.info.prefix = "encoder.";
  const data::BlockOptions blocks = config.smith.Blocks();
  const PretrainObjective objective = s.objective.id;
  const bool docsplit = objective == PretrainObjective::kDocSplit;
  const data::MaskOptions masks = s.masks;
  const bool word_masks = s.word_masks;
  const PretrainOptions& options = s.options;
  dist::ProcessGroup& group = s.group;
  using Batch = Chunks<data::BlockBatch>;
  const bool sentence_blocks = objective == PretrainObjective::kWordAndBlocks;
  const bool buckets = options.step_buckets || options.cuda_graphs;
  std::shared_ptr<CapturedSmithSteps> captured;
  if (options.cuda_graphs) {
    captured = std::make_shared<CapturedSmithSteps>(
        model, group, CapturedSmithSteps::Options{sentence_blocks, options.detach_block_targets});
  }
  Task<Batch> task{
      *model,
      InChunks<data::BlockBatch>(s.chunk,
                                 [=](const std::vector<const data::Document*>& docs, int64_t epoch) {
                                   if (!docsplit) return data::BuildBlockBatch(docs, blocks, &masks, epoch);
                                   return data::BuildDocSplitBatch(docs, blocks, word_masks ? &masks : nullptr,
                                                                   options.seed, epoch);
                                 }),
      [&](const Batch& batch) {
        if (docsplit && !buckets) return DocSplit(model, batch.chunks, group, options.temperature, options.lm_weight);
        const data::BlockBatch& b = batch.chunks.front();  // with buckets, the whole batch (no gradient caching)
        if (docsplit) {
          const data::StepCounts counts = data::CountStep(b);
          const data::StepShape shape = data::BucketFor(counts, b.B, b.K, blocks, data::StepBuckets{});
          return DocSplit(model, model::ToTensors(b, device, &shape), group, options.temperature, options.lm_weight,
                          &counts);
        }
        if (!buckets) {
          return SmithPretraining(model, model::ToTensors(b, device), sentence_blocks, group,
                                  options.detach_block_targets);
        }
        const data::StepCounts counts = data::CountStep(b);
        const data::StepShape shape = data::BucketFor(counts, b.B, b.K, blocks, data::StepBuckets{});
        // Validation runs without gradients: the plain objective, not the captured step's backward.
        if (captured && torch::GradMode::is_enabled()) {
          return captured->Step(b, counts, shape, 1.0 / static_cast<double>(options.accumulation));
        }
        return SmithPretraining(model, model::ToTensors(b, device, &shape), sentence_blocks, group,
                                options.detach_block_targets, &counts);
      },
      [=](const Batch& batch) { return batch.Sum([](const data::BlockBatch& b) { return b.B; }) / (docsplit ? 2 : 1); },
      [](const Batch& batch) { return batch.Sum([](const data::BlockBatch& b) { return b.real_tokens; }); },
      [=, smith = config.smith](const Batch& batch) {
        // WP never runs the document transformer; WP+SP and DocSplit do
        // (DocSplit has no masked blocks, so no block scores). Gradient
        // caching's extra forward is not model work and is not counted.
        double total = 0;
        for (const data::BlockBatch& b : batch.chunks)
          total += model::SmithPretrainingFlops(smith, b, objective != PretrainObjective::kWordLm);
        return total;
      },
      s.info,
      /*captures_steps=*/captured != nullptr};
  return Loop(options, s.corpus, std::move(task), group);
}

// Each kind that pre-trains, and its set-up of model, batches and objective.
const std::map<std::string, LoopResult (*)(PretrainSetup&)>& Pretrainers() {
  static const std::map<std::string, LoopResult (*)(PretrainSetup&)> pretrainers = {
      {"smith", PretrainSmith}, {"match_bert", PretrainFlat}, {"sdr", PretrainSdr}};
  return pretrainers;
}

}  // namespace

LoopResult RunPretraining(const PretrainOptions& options, dist::ProcessGroup& group) {
  const int rank = group.rank();
  const PretrainObjectiveInfo& objective = FindPretrainObjective(options.objective);
  DOCMATCH_CHECK(options.init.empty() || options.model.empty(), "train",
                 "give --model-config (random weights) or --init ",
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
    CheckObjectiveTrains(objective, config.kind, from);
  } else {
    const std::string yaml = options.model.empty() ? PretrainOptions::kDefaultModel : options.model;
    config = model::LoadModelConfig(yaml);
    model::SetVocabSize(&config, corpus->manifest().vocab_size);
    CheckObjectiveTrains(objective, config.kind, yaml);
  }
  DOCMATCH_CHECK(options.temperature > 0, "train", "--temperature must be positive, not ", options.temperature);
  DOCMATCH_CHECK(options.grad_cache >= 0, "train", "--grad-cache must be 0 (off) or a number of documents, not ",
                 options.grad_cache);
  DOCMATCH_CHECK(options.grad_cache == 0 || objective.in_batch_negatives, "train", "--grad-cache applies to docsplit, ",
                 "whose in-batch negatives make the batch one loss; for ", objective.name, " use --accumulation");
  DOCMATCH_CHECK(!options.step_buckets || config.kind == "smith", "train",
                 "--step-buckets pads SMITH's wp, wp+sp and docsplit batches; not a ", config.kind, " model's");
  DOCMATCH_CHECK(!options.step_buckets || options.grad_cache == 0, "train",
                 "--step-buckets pads the whole batch; it does not take --grad-cache's chunks");
  if (options.cuda_graphs) {
    DOCMATCH_CHECK(config.kind == "smith" && (objective.id == PretrainObjective::kWordLm ||
                                              objective.id == PretrainObjective::kWordAndBlocks),
                   "train", "--cuda-graphs captures SMITH's wp and wp+sp steps; not ", objective.name, " on a ",
                   config.kind, " model (leave the flag out)");
    CheckCudaGraphsRun("train", group, options.freeze_sentence_steps);
  }
  DOCMATCH_CHECK(!options.detach_block_targets || objective.sentence_blocks, "train",
                 "--detach-block-targets applies to wp+sp, the objective with masked sentence blocks; not to ",
                 objective.name);
  io::ModelFolderInfo info;
  info.config = config;
  info.stage = "pretrain";
  io::TrainedTokenizer(*corpus, &info);

  const data::MaskOptions masks =
      data::PretrainingMasks(corpus->manifest().vocab_size, options.seed, objective.sentence_blocks);
  UseDeterministicAlgorithms(options.deterministic);
  torch::manual_seed(options.seed);  // the same initial weights on every rank
  const bool docsplit = objective.id == PretrainObjective::kDocSplit;
  PretrainSetup setup{options,
                      objective,
                      corpus,
                      config,
                      info,
                      init,
                      init_info,
                      masks,
                      /*chunk=*/objective.in_batch_negatives ? options.grad_cache : 0,
                      /*word_masks=*/!docsplit || options.lm_weight != 0,
                      group};
  return Pretrainers().at(config.kind)(setup);
}

}  // namespace docmatch::train
