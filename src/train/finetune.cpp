// Fine-tuning as a stage of the training loop: each rank's slice of an
// epoch's pair permutation, the loss of FinetuneLosses() (a PairLoss), its
// validation, and negatives mined again when due (finetune.h).
#include "train/finetune.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "console/error.h"
#include "data/batches/pairs.h"
#include "data/corpus/random.h"
#include "eval/lexical.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/smith.h"
#include "model/transformer.h"
#include "train/finetune_batches.h"
#include "train/finetuning_losses.h"
#include "train/captured_step.h"
#include "train/grad_cache.h"
#include "train/mined_negatives.h"
#include "train/objectives.h"
#include "train/training_loop.h"
#include "train/training_run.h"

namespace docmatch::train {
namespace {

nlohmann::json OptionsJson(const FinetuneOptions& o) {
  nlohmann::json json = LoopOptionsJson(o);
  json.update({{"corpus", o.corpus},
               {"train_pairs", o.train_pairs},
               {"valid_pairs", o.valid_pairs},
               {"init", o.init},
               {"model", o.model},
               {"loss", o.loss},
               {"temperature", o.temperature},
               {"learn_temperature", o.learn_temperature},
               {"temperature_lr", o.temperature_lr},
               {"hard_negatives", o.hard_negatives},
               {"mine_negatives", o.mine_negatives},
               {"mine_margin", o.mine_margin},
               {"refresh_negatives", o.refresh_negatives},
               {"grad_cache", o.grad_cache},
               {"drop_related", o.drop_related},
               {"step_buckets", o.step_buckets},
               {"cuda_graphs", o.cuda_graphs}});
  return json;
}

// A pair objective (Contrastive, MultiPositiveContrastive) over this rank's
// pairs drawn in chunks (ChunkedPairObjective, grad_cache.h), each chunk's
// sources, targets and hard negatives embedded in one pass.
Objective PairObjectiveOverChunks(model::DocumentModel& model, std::vector<PreparedChunk> chunks,
                                  const model::Temperature& temperature, const PairObjective& objective,
                                  const torch::Device& device) {
  // Owned by the chunk function: Backward() re-runs the chunks after this returns.
  auto prepared = std::make_shared<const std::vector<PreparedChunk>>(std::move(chunks));
  return ChunkedPairObjective(
      static_cast<int64_t>(prepared->size()),
      [&model, prepared, device](int64_t i) { return EmbedPairs(model, (*prepared)[i], device); }, temperature,
      objective, device);
}

// finetune --refresh-negatives (ANCE): the model's vectors of the whole
// corpus, each rank embedding its share with dropout off, the shares
// gathered on the data plane (counts on the control plane); every rank then
// mines the same negatives from them.
MinedNegatives MineFromTheModel(model::DocumentModel& model, const data::Corpus& corpus,
                                const std::vector<data::LabelledPair>& pairs, const FinetuneOptions& options,
                                dist::ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  model.module().eval();
  const int64_t N = corpus.num_documents();
  const int64_t begin = N * group.rank() / group.size(), end = N * (group.rank() + 1) / group.size();
  std::vector<torch::Tensor> parts;
  for (int64_t from = begin; from < end; from += options.batch_size) {
    std::vector<int64_t> ids;
    for (int64_t d = from; d < std::min(end, from + options.batch_size); ++d) ids.push_back(d);
    parts.push_back(EmbedDocuments(model, corpus, ids, group.device()));
  }
  model.module().train();
  const torch::Tensor local =
      parts.empty() ? torch::empty({0, model.dimension()}, torch::TensorOptions(torch::kFloat).device(group.device()))
                    : torch::cat(parts);  // (n_r, D)
  const std::vector<int64_t> counts = group.control().AllGather(local.size(0));
  torch::Tensor all = torch::empty({N, local.size(1)}, local.options());  // (N, D)
  group.data().AllGatherUnevenAsync(local.contiguous(), all, counts)->Wait();
  return MineDenseNegatives(all, pairs, options.mine_negatives, options.mine_margin);
}

struct Validation {
  double loss = 0, accuracy = 0;
  double mrr = -1;  // contrastive: each held-out pair's reciprocal rank among the validation pool; -1: none
};

// Contrastive validation: every validation pair at once, in every process
// (validation sets are small; the figure is then the same for any world size).
// `objective` scores all of them in one process, given the validation pairs' relation.
Validation ValidateContrastive(model::DocumentModel& model, const data::Corpus& corpus,
                               const std::vector<data::LabelledPair>& pairs, const FinetuneOptions& options,
                               const std::function<Objective(const ContrastivePairs&, const RelatedPairs&)>& objective,
                               const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.module().eval();
  const std::vector<data::LabelledPair> related = Related(pairs);
  std::vector<int64_t> order(related.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const HardNegatives hard(pairs);
  std::vector<train::ContrastivePairs> chunks;
  for (size_t begin = 0; begin < order.size(); begin += options.batch_size) {
    const int64_t end = std::min(order.size(), begin + options.batch_size);
    chunks.push_back(EmbedPairs(
        model,
        PrepareChunk(model, corpus,
                     DrawPairs(related, order, begin, end, hard, options.hard_negatives, options.seed, /*epoch=*/0)),
        device));
  }
  model.module().train();
  if (chunks.empty()) return {};
  const auto cat = [&](torch::Tensor train::ContrastivePairs::*field) {
    std::vector<torch::Tensor> parts;
    for (const auto& c : chunks) parts.push_back(c.*field);
    return torch::cat(parts);
  };
  const train::ContrastivePairs all{
      cat(&train::ContrastivePairs::sources),    cat(&train::ContrastivePairs::targets),
      cat(&train::ContrastivePairs::source_ids), cat(&train::ContrastivePairs::target_ids),
      cat(&train::ContrastivePairs::negatives),  cat(&train::ContrastivePairs::negative_ids)};
  // The validation pairs' own relation, as training uses the training pairs'.
  const Objective scored = objective(all, RelatedPairs(pairs));
  return {scored.value, scored.parts.at("top1"), scored.parts.count("mrr") ? scored.parts.at("mrr") : -1.0};
}

// Every rank scores its share (i % world == rank) of the validation pairs.
Validation ValidatePairs(model::DocumentModel& model, const data::Corpus& corpus,
                         const std::vector<data::LabelledPair>& pairs, int64_t batch_size, dist::ProcessGroup& group) {
  const torch::Device device = group.device();
  torch::NoGradGuard no_grad;
  model.module().eval();
  std::vector<int64_t> mine;
  for (size_t i = group.rank(); i < pairs.size(); i += group.size()) mine.push_back(i);
  // Summed BCE and correct pairs, kept on the device until the end: one host read.
  torch::Tensor sums = torch::zeros({2}, torch::TensorOptions(torch::kFloat64).device(device));
  for (size_t begin = 0; begin < mine.size(); begin += batch_size) {
    const int64_t end = std::min(mine.size(), begin + batch_size);
    torch::Tensor labels;
    const torch::Tensor logits = Logits(model, corpus, pairs, mine, begin, end, device, &labels);
    const auto [bce, right] = PairSums(logits, labels);
    sums += torch::stack({bce.to(torch::kFloat64), right.to(torch::kFloat64)});
  }
  model.module().train();
  sums = sums.to(torch::kCPU);
  std::vector<double> totals(sums.data_ptr<double>(), sums.data_ptr<double>() + 2);
  group.control().Sum(totals);  // host values
  const double n = static_cast<double>(pairs.size());
  return {totals[0] / n, totals[1] / n};
}

// The model a fine-tuning run starts from: its own newest checkpoint when it
// resumes, else --init, else --model-config with random weights (the same on
// every rank), on the run's device. Checks --loss against it.
struct StartingModel {
  io::ModelFolderInfo info;  // what this run's checkpoints and best/ describe: the fine-tuned module alone
  std::string pretrained;    // the stage of the folder it came from, for the log
  std::unique_ptr<model::DocumentModel> model;
};
StartingModel LoadStartingModel(const FinetuneOptions& options, const FinetuneLossInfo& loss,
                                const data::Corpus& corpus, int rank, const torch::Device& device) {
  const TrainingRun::ModelSource source =
      TrainingRun::SourceOfModel(options.run, options.resume, options.init, "finetune", rank);
  StartingModel start;
  io::ModelFolderInfo& info = start.info;
  if (!source.folder.empty()) {
    info = io::ReadModelFolderInfo(source.folder);
    io::CheckTokenizer(info, corpus, source.folder);
  } else {
    info.config = model::LoadModelConfig(options.model);
    model::SetVocabSize(&info.config, corpus.manifest().vocab_size);
  }
  DOCMATCH_CHECK(!options.drop_related || !loss.refuses_drop_related, "finetune",
                 "--drop-related leaves labelled related documents out of the in-batch negatives; --loss ", loss.name,
                 " ", loss.refuses_drop_related ? loss.refuses_drop_related : "");
  CheckLossTrains(loss, info.config.kind);
  UseDeterministicAlgorithms(options.deterministic);
  torch::manual_seed(options.seed);  // the same initial weights on every rank
  start.model = model::DocumentModel::Create(info.config);
  DOCMATCH_CHECK(!options.step_buckets || start.model->takes_step_buckets(), "finetune",
                 "--step-buckets pads SMITH's embedding passes; not a ", info.config.kind, " model's (leave the flag "
                 "out)");
  DOCMATCH_CHECK(!options.cuda_graphs || start.model->takes_step_buckets(), "finetune",
                 "--cuda-graphs captures SMITH's fine-tuning steps; not a ", info.config.kind, " model's (leave the "
                 "flag out)");
  start.model->set_step_buckets(options.step_buckets);
  if (!options.init.empty() && !source.resuming) {
    io::LoadFolderWeights(start.model->module(), options.init, info);
    if (rank == 0) LOG(INFO) << "[finetune] encoder from " << options.init << " (" << info.stage << ")";
  }
  start.model->module().to(device);
  model::UsePackedAttention(start.model->module(), model::ParsePackedAttention(options.attention));
  start.pretrained = info.stage;
  info.prefix = "";
  info.weights = "model.pt";
  info.stage = "finetune";
  io::TrainedTokenizer(corpus, &info);
  return start;
}

// A run's labelled pairs and what its steps draw from them. Checks the
// options that concern them.
struct TrainingPairs {
  std::vector<data::LabelledPair> train, valid;
  std::vector<data::LabelledPair> drawn;  // every labelled pair, or the related ones (in-batch negatives)
  HardNegatives hard;                     // each source's labelled negatives, and the mined ones
  RelatedPairs relation;                  // the training pairs' relation, for --drop-related
};
// --drop-related where every document the related pairs draw is related to
// every other: no in-batch candidate would be left as a negative, the loss
// would be 0 at every step and nothing learnt. Refused, unless labelled or
// mined hard negatives bring candidates of their own.
void CheckNegativesLeft(const FinetuneOptions& options, const std::vector<data::LabelledPair>& train,
                        const std::vector<data::LabelledPair>& drawn, const RelatedPairs& relation) {
  if (!options.drop_related) return;
  const bool hard = options.hard_negatives > 0 &&
                    (options.mine_negatives > 0 ||
                     std::any_of(train.begin(), train.end(), [](const auto& p) { return p.label == 0; }));
  if (hard) return;
  std::set<int64_t> documents;
  for (const auto& p : drawn) documents.insert({p.source, p.target});
  for (int64_t d : documents) {
    int64_t related = 0;
    for (int64_t other : relation.Of(d)) related += other != d && documents.count(other);
    if (related + 1 < static_cast<int64_t>(documents.size())) return;  // d has a negative
  }
  throw Error("finetune", "--drop-related would leave no negative: each of the " + std::to_string(documents.size()) +
                              " documents of the related pairs is related to every other, so every in-batch "
                              "candidate is dropped and the loss is 0 at every step; leave out --drop-related, or "
                              "give pairs of unrelated documents (label 0) with --hard-negatives");
}

TrainingPairs ReadTrainingPairs(const FinetuneOptions& options, const FinetuneLossInfo& loss,
                                const data::Corpus& corpus, int rank, int world) {
  const bool contrastive = loss.in_batch_negatives;
  std::vector<data::LabelledPair> train = data::ReadPairs(options.train_pairs, corpus);
  std::vector<data::LabelledPair> valid =
      options.valid_pairs.empty() ? std::vector<data::LabelledPair>{} : data::ReadPairs(options.valid_pairs, corpus);
  std::vector<data::LabelledPair> drawn = contrastive ? Related(train) : train;
  HardNegatives hard(train);
  RelatedPairs relation(train);
  if (contrastive && !loss.refuses_drop_related) CheckNegativesLeft(options, train, drawn, relation);
  TrainingPairs pairs{std::move(train), std::move(valid), std::move(drawn), std::move(hard), std::move(relation)};
  if (options.mine_negatives > 0) {
    DOCMATCH_CHECK(contrastive, "finetune", "--mine-negatives adds negatives to the contrastive loss; ", loss.name,
                   " scores the labelled pairs alone");
    DOCMATCH_CHECK(options.hard_negatives > 0, "finetune", "--mine-negatives ", options.mine_negatives,
                   " with --hard-negatives 0 would mine negatives no pair draws: give --hard-negatives N");
    // Every rank mines the same negatives from the same corpus (no traffic).
    const eval::LexicalIndex index(corpus, options.progress && rank == 0);
    const MinedNegatives mined = MineLexicalNegatives(index, pairs.train, options.mine_negatives, options.mine_margin);
    pairs.hard.SetMined(mined.by_source);
    int64_t added = 0;
    for (const auto& [source, negatives] : mined.by_source) added += static_cast<int64_t>(negatives.size());
    if (rank == 0) {
      LOG(INFO) << "[finetune] mined " << added << " TF-IDF negatives for " << mined.sources << " sources (up to "
                << options.mine_negatives << " each; left out: " << mined.dropped_related << " labelled related, "
                << mined.dropped_margin << " above the source's best positive by more than " << options.mine_margin
                << "); each pair draws --hard-negatives " << options.hard_negatives
                << " from its source's labelled and mined negatives";
    }
  }
  DOCMATCH_CHECK(options.refresh_negatives == 0 || options.mine_negatives > 0, "finetune",
                 "--refresh-negatives mines --mine-negatives N again from the model: give --mine-negatives");
  const int64_t global_batch = options.batch_size * world;
  DOCMATCH_CHECK(options.grad_cache >= 0, "finetune", "--grad-cache must be 0 (off) or a number of pairs, not ",
                 options.grad_cache);
  DOCMATCH_CHECK(options.grad_cache == 0 || contrastive, "finetune",
                 "--grad-cache applies to a loss with in-batch negatives (contrastive, multipositive), whose "
                 "batch is one loss; ",
                 loss.name, " scores each pair alone: use --accumulation");
  DOCMATCH_CHECK(static_cast<int64_t>(pairs.drawn.size()) >= global_batch, "finetune", options.train_pairs, " has ",
                 pairs.drawn.size(), contrastive ? " related" : "", " pairs, fewer than one global batch of ",
                 global_batch, " (ranks x --batch-size)");
  return pairs;
}

// The contrastive temperature: --temperature, or with --learn-temperature
// log(1 / tau) trained beside the model in an optimizer group of its own (no
// weight decay, learning rate --temperature-lr on the same schedule),
// averaged over ranks like every gradient, outside gradient clipping; saved
// in the run's checkpoints, not in the model folders (embedding does not use
// it).
class RunTemperature {
 public:
  RunTemperature(const FinetuneOptions& options, const FinetuneLossInfo& loss, const torch::Device& device)
      : log_scale_(LogScale(options, loss, device)),
        temperature_(log_scale_.defined() ? model::Temperature::Learned(log_scale_)
                                          : model::Temperature(options.temperature)),
        lr_(options.optimizer.lr),
        lr_factor_(options.temperature_lr / options.optimizer.lr) {}
  const model::Temperature& get() const { return temperature_; }
  // `parameters` and the learned log-scale after them: what the gradient synchronizer averages.
  std::vector<torch::Tensor> After(std::vector<torch::Tensor> parameters) const {
    if (log_scale_.defined()) parameters.push_back(log_scale_);
    return parameters;
  }
  // The log-scale's group, after the optimizer's others, and its factor of
  // the scheduled learning rate after theirs (the training loop's lr_factors).
  void AddGroup(torch::optim::AdamW* optimizer) const {
    if (!log_scale_.defined()) return;
    optimizer->add_param_group(torch::optim::OptimizerParamGroup(
        {log_scale_}, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr_).weight_decay(0.0))));
  }
  void AddLrFactor(std::vector<double>* factors) const {
    if (log_scale_.defined()) factors->push_back(lr_factor_);
  }
  void Restore(const nlohmann::json& trainer) {
    if (!log_scale_.defined()) return;
    torch::NoGradGuard no_grad;
    log_scale_.fill_(trainer.at("log_scale").get<double>());
  }
  void Save(nlohmann::json* trainer) const {
    if (log_scale_.defined()) (*trainer)["log_scale"] = log_scale_.item<double>();  // float32, exact in a double
  }

 private:
  static torch::Tensor LogScale(const FinetuneOptions& options, const FinetuneLossInfo& loss,
                                const torch::Device& device) {
    DOCMATCH_CHECK(!options.learn_temperature || loss.in_batch_negatives, "finetune",
                   "--learn-temperature applies to a loss with in-batch negatives (contrastive, "
                   "multipositive); ",
                   loss.name, " has no temperature");
    DOCMATCH_CHECK(options.temperature_lr > 0, "finetune", "--temperature-lr must be positive, not ",
                   options.temperature_lr);
    // A run learns its temperature for its whole life or never: the
    // optimizer has one group more when it does, so its saved state fits
    // only the same choice. Said before the optimizer is built, instead of
    // libtorch's failure to load it.
    if (const nlohmann::json trainer = options.resume ? TrainingRun::LatestTrainerState(options.run) : nullptr;
        trainer.is_object()) {
      const bool learned = trainer.contains("log_scale");
      DOCMATCH_CHECK(learned == options.learn_temperature, "finetune", options.run,
                     learned ? " learns its temperature: resume with --learn-temperature"
                             : " was trained at a fixed temperature: resume without --learn-temperature",
                     ", or start over with --fresh");
    }
    if (!options.learn_temperature) return {};
    return torch::full({}, std::log(1.0 / options.temperature), torch::TensorOptions(device)).requires_grad_();
  }

  torch::Tensor log_scale_;  // defined when learned
  model::Temperature temperature_;
  double lr_, lr_factor_;  // the schedule's peak, and the log-scale's multiple of it
};

// What one micro-step trains on, drawn, read and batched on the host.
struct MicroBatch {
  int64_t epoch = 0, position = 0;    // where it was drawn
  uint64_t lists = 0;                 // from which version of the negative lists
  std::vector<PreparedChunk> chunks;  // a loss with in-batch negatives: the related pairs in chunks
  PreparedPairs pairs;                // a loss of each pair alone: the labelled pairs
  std::vector<int64_t> documents;     // corpus indices, for the non-finite report
  int64_t tokens = 0;                 // the tokens the model reads of them
};

// A fine-tuning loss as the stage runs it (its entry in FinetuneLosses()
// names it): a micro-batch of the pairs it draws, built on the host (any
// thread: Build reads only the corpus, the pairs and the model's batching),
// its objective on the device, and the validation figures.
class PairLoss {
 public:
  virtual ~PairLoss() = default;
  // Pairs [begin, end) of `order` into `batch`: its documents, tokens and
  // whatever Compute reads.
  virtual void Build(MicroBatch* batch, const std::vector<int64_t>& order, int64_t begin, int64_t end,
                     int64_t epoch) const = 0;
  virtual Objective Compute(MicroBatch& batch) = 0;
  virtual Validation Validate() = 0;
};

// What a PairLoss reads: the run's options, model, corpus, pairs and temperature.
struct PairLossContext {
  const FinetuneOptions& options;
  model::DocumentModel& model;
  const data::Corpus& corpus;
  const TrainingPairs& pairs;
  const RunTemperature& temperature;
  dist::ProcessGroup& group;
  CapturedContrastiveSteps* captured;  // --cuda-graphs' steps (contrastive only), or null
};

// --loss contrastive: related pairs in chunks of --grad-cache (the whole
// batch without), each chunk's sources, targets and hard negatives embedded
// in one pass; symmetric InfoNCE over every rank's (objectives.h, Contrastive).
class ContrastivePairLoss : public PairLoss {
 public:
  explicit ContrastivePairLoss(const PairLossContext& c)
      : c_(c), chunk_(c.options.grad_cache > 0 ? c.options.grad_cache : c.options.batch_size) {}
  void Build(MicroBatch* b, const std::vector<int64_t>& order, int64_t begin, int64_t end,
             int64_t epoch) const override {
    const FinetuneOptions& o = c_.options;
    for (int64_t from = begin; from < end; from += chunk_) {
      b->chunks.push_back(PrepareChunk(c_.model, c_.corpus,
                                       DrawPairs(c_.pairs.drawn, order, from, std::min(end, from + chunk_),
                                                 c_.pairs.hard, o.hard_negatives, o.seed, epoch)));
      const std::vector<int64_t> drawn = b->chunks.back().documents.All();
      b->documents.insert(b->documents.end(), drawn.begin(), drawn.end());
      b->tokens += b->chunks.back().tokens;
    }
  }
  Objective Compute(MicroBatch& b) override {
    if (c_.captured != nullptr) {  // the captured step: one chunk, no relation
      TORCH_CHECK(b.chunks.size() == 1, "a captured fine-tuning step embeds its batch in one pass");
      return c_.captured->Step(b.chunks.front(), 1.0 / static_cast<double>(c_.options.accumulation));
    }
    const RelatedPairs& related = c_.pairs.relation;
    return PairObjectiveOverChunks(
        c_.model, std::move(b.chunks), c_.temperature.get(),
        [&](const ContrastivePairs& pairs, const model::Temperature& t) { return Gathered(pairs, t, related); },
        c_.group.device());
  }
  Validation Validate() override {
    const model::Temperature temperature(c_.temperature.get().value());
    return ValidateContrastive(
        c_.model, c_.corpus, c_.pairs.valid, c_.options,
        [&](const ContrastivePairs& all, const RelatedPairs& relation) {
          return InOneProcess(all, temperature, relation);
        },
        c_.group.device());
  }

 protected:
  // The objective over all ranks' pairs, and over pairs all in this process
  // (validation); `relation`: the pairs' (training or validation) relation.
  virtual Objective Gathered(const ContrastivePairs& pairs, const model::Temperature& temperature,
                             const RelatedPairs& relation) const {
    return Contrastive(pairs, temperature, c_.group, c_.options.drop_related ? &relation : nullptr);
  }
  virtual Objective InOneProcess(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                 const RelatedPairs& relation) const {
    return ContrastiveInOneProcess(pairs, temperature, c_.options.drop_related ? &relation : nullptr);
  }
  const PairLossContext c_;

 private:
  const int64_t chunk_;  // pairs a chunk draws and embeds
};

// --loss multipositive: as contrastive, every in-batch candidate the training
// pairs label related to the query one more positive of it (objectives.h,
// MultiPositiveContrastive); validation's by the validation pairs' relation.
class MultiPositivePairLoss : public ContrastivePairLoss {
 public:
  using ContrastivePairLoss::ContrastivePairLoss;

 protected:
  Objective Gathered(const ContrastivePairs& pairs, const model::Temperature& temperature,
                     const RelatedPairs& relation) const override {
    return MultiPositiveContrastive(pairs, temperature, c_.group, relation);
  }
  Objective InOneProcess(const ContrastivePairs& pairs, const model::Temperature& temperature,
                         const RelatedPairs& relation) const override {
    return MultiPositiveInOneProcess(pairs, temperature, relation);
  }
};

// --loss bce: each labelled pair's logit against its label (objectives.h, Siamese).
class BcePairLoss : public PairLoss {
 public:
  explicit BcePairLoss(const PairLossContext& c) : c_(c) {}
  void Build(MicroBatch* b, const std::vector<int64_t>& order, int64_t begin, int64_t end,
             int64_t /*epoch*/) const override {
    b->pairs = PreparePairs(c_.model, c_.corpus, c_.pairs.drawn, order, begin, end);
    b->documents = b->pairs.documents;
    b->tokens = b->pairs.tokens;
  }
  Objective Compute(MicroBatch& b) override {
    torch::Tensor labels;
    const torch::Tensor logits = PairLogitsOf(c_.model, b.pairs, c_.group.device(), &labels);
    return Siamese(logits.to(torch::kFloat), labels, c_.group);
  }
  Validation Validate() override {
    return ValidatePairs(c_.model, c_.corpus, c_.pairs.valid, c_.options.batch_size, c_.group);
  }

 private:
  PairLossContext c_;
};

// Each loss of FinetuneLosses() and its PairLoss.
std::unique_ptr<PairLoss> MakePairLoss(FinetuneLoss loss, const PairLossContext& context) {
  switch (loss) {
    case FinetuneLoss::kContrastive:
      return std::make_unique<ContrastivePairLoss>(context);
    case FinetuneLoss::kMultiPositive:
      return std::make_unique<MultiPositivePairLoss>(context);
    case FinetuneLoss::kBce:
      return std::make_unique<BcePairLoss>(context);
  }
  throw std::logic_error("[finetune] a loss of the table without a PairLoss");
}

// This rank's micro-batches in order: each epoch's permutation of the pairs
// (the same on every rank), global batches of ranks x --batch-size taken
// from it in turn, this rank's slice of each; a global batch that the rest
// of an epoch cannot fill starts the next epoch. The loader thread builds the
// next micro-batch while the device runs this one (the draws are pure
// functions of the epoch, the position and the negative lists, so the batches
// are the same as built in place); the main thread only embeds.
class MicroBatches {
 public:
  // From `position` (a global pair position, the same on every rank) of `epoch`.
  MicroBatches(const FinetuneOptions& options, const PairLoss& loss, const TrainingPairs& pairs, int rank, int world,
               int64_t epoch, int64_t position)
      : options_(options),
        loss_(loss),
        pairs_(pairs),
        rank_(rank),
        global_batch_(options.batch_size * world),
        epoch_(epoch),
        position_(position),
        order_(Order(epoch)) {}
  MicroBatches(const MicroBatches&) = delete;
  MicroBatches& operator=(const MicroBatches&) = delete;

  // The next micro-step's: the one built ahead, or (the first, or one drawn
  // before the lists changed) built now. Rethrows what the loader thread threw.
  MicroBatch Next() {
    if (EpochEnds(position_)) {
      order_ = Order(++epoch_);
      position_ = 0;
    }
    const int64_t at = position_;
    position_ += global_batch_;
    std::optional<MicroBatch> taken;
    if (ahead_.valid()) taken = ahead_.get();
    if (!taken || taken->epoch != epoch_ || taken->position != at || taken->lists != lists_) {
      taken = Build(epoch_, at, order_, lists_);
    }
    return std::move(*taken);
  }
  // The one after it, started on the loader thread.
  void BuildNextAhead() {
    int64_t epoch = epoch_, at = position_;
    std::shared_ptr<const std::vector<int64_t>> order = order_;
    if (EpochEnds(at)) {
      ++epoch;
      at = 0;
      order = nullptr;  // that epoch's order, made on the thread
    }
    ahead_ = std::async(std::launch::async, [this, epoch, at, order, lists = lists_]() {
      return Build(epoch, at, order ? order : Order(epoch), lists);
    });
  }
  // The loader thread done: before anything else reads the corpus or the lists.
  void Wait() const {
    if (ahead_.valid()) ahead_.wait();
  }
  // The negative lists were mined again: what was drawn from the old ones is drawn again.
  void ListsChanged() { ++lists_; }

  // Where the next micro-batch starts, as checkpoints keep it, and the epoch of the last.
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  // Epochs done, fractional: the next batch's start over the pairs drawn from.
  double progress() const {
    return static_cast<double>(epoch_) +
           static_cast<double>(position_) / static_cast<double>(std::max<size_t>(1, pairs_.drawn.size()));
  }

 private:
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch) const {
    return std::make_shared<const std::vector<int64_t>>(EpochOrder(pairs_.drawn.size(), options_.seed, epoch));
  }
  // Whether the pairs after `at` hold no more global batch.
  bool EpochEnds(int64_t at) const { return at + global_batch_ > static_cast<int64_t>(pairs_.drawn.size()); }
  MicroBatch Build(int64_t epoch, int64_t at, const std::shared_ptr<const std::vector<int64_t>>& order,
                   uint64_t lists) const {
    MicroBatch b{epoch, at, lists, {}, {}, {}, 0};
    const int64_t begin = at + rank_ * options_.batch_size;
    loss_.Build(&b, *order, begin, begin + options_.batch_size, epoch);
    return b;
  }

  const FinetuneOptions& options_;
  const PairLoss& loss_;
  const TrainingPairs& pairs_;
  const int rank_;
  const int64_t global_batch_;
  int64_t epoch_, position_;
  std::shared_ptr<const std::vector<int64_t>> order_;
  uint64_t lists_ = 0;
  std::future<MicroBatch> ahead_;
};

// finetune --cuda-graphs: the captured contrastive steps, after checking
// that the run can take them; null without the flag.
std::unique_ptr<CapturedContrastiveSteps> MakeCapturedSteps(const FinetuneOptions& options,
                                                            const FinetuneLossInfo& loss, model::DocumentModel& model,
                                                            const model::Temperature& temperature,
                                                            const dist::ProcessGroup& group) {
  if (!options.cuda_graphs) return nullptr;
  DOCMATCH_CHECK(loss.id == FinetuneLoss::kContrastive, "finetune", "--cuda-graphs captures --loss contrastive; not ",
                 loss.name, ": use --loss contrastive, or leave the flag out");
  DOCMATCH_CHECK(!options.drop_related, "finetune",
                 "--cuda-graphs cannot take --drop-related (its relation masks are made on the host at every step): "
                 "leave one of them out");
  DOCMATCH_CHECK(options.grad_cache == 0, "finetune",
                 "--cuda-graphs captures the whole batch's step; it does not take --grad-cache's chunks: leave one of "
                 "them out");
  CheckCudaGraphsRun("finetune", group, options.freeze_sentence_steps);
  return std::make_unique<CapturedContrastiveSteps>(model, temperature, group.device());
}

// Fine-tuning as a stage of the training loop (training_loop.h): the
// starting model, the labelled pairs drawn in micro-batches, the loss
// (FinetuneLosses()), the temperature, and the negatives mined again from
// the model when due.
class FinetuningStage : public TrainingStage {
 public:
  FinetuningStage(const FinetuneOptions& options, dist::ProcessGroup& group);

  const char* name() const override { return "finetune"; }
  const char* unit() const override { return "pairs"; }
  const char* headline() const override { return loss_.headline; }
  torch::nn::Module& module() override { return model_.module(); }
  const io::ModelFolderInfo& info() const override { return start_.info; }
  const data::Corpus& corpus() const override { return corpus_; }
  bool CapturesSteps() const override { return captured_ != nullptr; }
  std::vector<torch::Tensor> TrainedParameters() override { return temperature_.After(model_.module().parameters()); }
  void AddOptimizerGroups(torch::optim::AdamW* optimizer) override { temperature_.AddGroup(optimizer); }
  void AddLrFactors(std::vector<double>* factors) const override { temperature_.AddLrFactor(factors); }
  void Start(const std::optional<ResumedState>& resumed) override;
  void NextBatch() override { batch_ = batches_->Next(); }
  Objective Compute() override;
  BatchCounts Counts() const override {
    const int64_t world = group_.size();
    return {options_.batch_size * world, static_cast<int64_t>(batch_->documents.size()) * world, batch_->tokens * world,
            0.0};
  }
  const std::vector<int64_t>& BatchDocuments() const override { return batch_->documents; }
  void DropBatch() override { batch_.reset(); }
  void AfterStep(int64_t step) override;
  int64_t epoch() const override { return batches_->epoch(); }
  double epoch_progress() const override { return batches_->progress(); }
  int64_t validate_every() const override { return pairs_.valid.empty() ? 0 : options_.validate_every; }
  std::map<std::string, double> Validate() override;
  DataPosition Position() const override { return {batches_->epoch(), batches_->position()}; }
  void Save(nlohmann::json* trainer) const override;

 private:
  const FinetuneOptions& options_;
  dist::ProcessGroup& group_;
  const torch::Device device_;
  const data::Corpus corpus_;
  const FinetuneLossInfo& loss_;
  StartingModel start_;
  model::DocumentModel& model_;
  TrainingPairs pairs_;
  RunTemperature temperature_;
  std::unique_ptr<CapturedContrastiveSteps> captured_;  // --cuda-graphs
  std::unique_ptr<PairLoss> pair_loss_;
  std::optional<MicroBatches> batches_;
  std::optional<MicroBatch> batch_;  // the micro-batch taken
};

FinetuningStage::FinetuningStage(const FinetuneOptions& options, dist::ProcessGroup& group)
    : options_(options),
      group_(group),
      device_(group.device()),
      corpus_(options.corpus),
      loss_(FindFinetuneLoss(options.loss)),
      start_(LoadStartingModel(options, loss_, corpus_, group.rank(), device_)),
      model_(*start_.model),
      pairs_(ReadTrainingPairs(options, loss_, corpus_, group.rank(), group.size())),
      temperature_(options, loss_, device_),
      captured_(MakeCapturedSteps(options, loss_, model_, temperature_.get(), group)),
      pair_loss_(MakePairLoss(loss_.id, {options, model_, corpus_, pairs_, temperature_, group, captured_.get()})) {}

void FinetuningStage::Start(const std::optional<ResumedState>& resumed) {
  if (resumed) {
    temperature_.Restore(resumed->trainer);
    if (resumed->trainer.contains("mined_negatives")) {  // the lists of the last refresh
      pairs_.hard.SetMined(
          resumed->trainer["mined_negatives"].get<std::unordered_map<int64_t, std::vector<int64_t>>>());
    }
  }
  // The global pair position in the epoch: the same on every rank, so any
  // world size resumes from rank 0's.
  batches_.emplace(options_, *pair_loss_, pairs_, group_.rank(), group_.size(), resumed ? resumed->epoch : 0,
                   resumed ? resumed->trainer.at("positions").at(0).get<int64_t>() : 0);
  if (group_.rank() != 0 || resumed) return;
  LOG(INFO) << "[finetune] " << start_.info.config.kind
            << (options_.init.empty() ? " from scratch" : " from " + start_.pretrained) << ", " << options_.loss
            << " loss on " << pairs_.drawn.size() << " of " << pairs_.train.size() << " training pairs, "
            << pairs_.valid.size() << " validation pairs";
  if (options_.drop_related) {  // only a loss that takes it (FinetuneLossInfo::refuses_drop_related)
    LOG(INFO) << "[finetune] --drop-related: an in-batch candidate that a training pair labels related to the "
                 "query is left out of its negatives";
  }
  const model::MatchBertConfig& flat = start_.info.config.match_bert;
  if (start_.info.config.kind == "match_bert" && flat.window_pooling == "maxsim") {
    LOG(INFO) << "[finetune] window_pooling maxsim: the loss reads each document's mean window vector (up to "
              << flat.chunks << " windows, all in one graph); eval and search score by MaxSim";
  }
}

Objective FinetuningStage::Compute() {
  batches_->BuildNextAhead();  // the next micro-step's, while the device runs this one
  return pair_loss_->Compute(*batch_);
}

// The loader thread is done before anything else reads the corpus or the
// lists; then --refresh-negatives mines the lists again from the model, at
// every multiple and the last step too (a run stopped there resumes with
// the lists it would have used).
void FinetuningStage::AfterStep(int64_t step) {
  batches_->Wait();
  if (options_.refresh_negatives <= 0 || step % options_.refresh_negatives != 0) return;
  const MinedNegatives mined = MineFromTheModel(model_, corpus_, pairs_.train, options_, group_);
  pairs_.hard.SetMined(mined.by_source);
  batches_->ListsChanged();
  if (group_.rank() == 0) {
    LOG(INFO) << "[finetune] step " << step << ": negatives mined again from the model's vectors of "
              << corpus_.num_documents() << " documents (left out: " << mined.dropped_related << " labelled related, "
              << mined.dropped_margin << " above the best positive by more than " << options_.mine_margin << ")";
  }
}

std::map<std::string, double> FinetuningStage::Validate() {
  const Validation v = pair_loss_->Validate();
  std::map<std::string, double> values = {{"loss", v.loss}, {headline(), v.accuracy}};
  if (v.mrr >= 0) values["mrr"] = v.mrr;
  return values;
}

void FinetuningStage::Save(nlohmann::json* trainer) const {
  (*trainer)["options"] = OptionsJson(options_);
  temperature_.Save(trainer);
  if (options_.refresh_negatives > 0) (*trainer)["mined_negatives"] = pairs_.hard.mined();
}

}  // namespace

LoopResult RunFinetuning(const FinetuneOptions& options, dist::ProcessGroup& group) {
  FinetuningStage stage(options, group);
  return RunTrainingLoop(stage, options, group);
}

}  // namespace docmatch::train
