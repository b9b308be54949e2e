// The fine-tuning loop: each rank's slice of an epoch's pair permutation, the
// Siamese objective, validation and the best model, resumable (finetune.h).
#include "train/finetune.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "console/progress.h"
#include "data/batches/pairs.h"
#include "data/corpus/random.h"
#include "dist/gradient_synchronizer.h"
#include "eval/lexical.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/smith.h"
#include "train/grad_cache.h"
#include "train/mined_negatives.h"
#include "train/objectives.h"
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
               {"drop_related", o.drop_related}});
  return json;
}

// The epoch's order of the pairs: the same permutation on every rank.
std::vector<int64_t> EpochOrder(size_t pairs, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(pairs);
  for (size_t i = 0; i < pairs; ++i) order[i] = static_cast<int64_t>(i);
  data::KeyedRandom random(seed, {0x70616972ULL /* "pair" */, static_cast<uint64_t>(epoch)});
  random.Shuffle(&order);
  return order;
}

// Pair logits for pairs [begin, end) of `pairs` taken in `order`.
// Pairs [begin, end) of `pairs` taken in `order`, read and batched on the
// host (any thread): the sources' batch, the targets', the labels.
struct PreparedPairs {
  std::shared_ptr<const model::DocumentModel::HostBatch> sources, targets;
  std::vector<float> labels;
  std::vector<int64_t> documents;  // corpus indices, source and target of each pair
};
PreparedPairs PreparePairs(const model::DocumentModel& model, const data::Corpus& corpus,
                           const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order,
                           int64_t begin, int64_t end) {
  PreparedPairs prepared;
  std::vector<data::Document> sources, targets;
  for (int64_t i = begin; i < end; ++i) {
    const data::LabelledPair& p = pairs[order[i]];
    sources.push_back(corpus.Get(p.source));
    targets.push_back(corpus.Get(p.target));
    prepared.labels.push_back(p.label);
    prepared.documents.insert(prepared.documents.end(), {p.source, p.target});
  }
  std::vector<const data::Document*> a, b;
  for (size_t i = 0; i < sources.size(); ++i) {
    a.push_back(&sources[i]);
    b.push_back(&targets[i]);
  }
  prepared.sources = model.Batch(a);
  prepared.targets = model.Batch(b);
  return prepared;
}

// Their pair logits (B,), and the labels on `device`.
torch::Tensor PairLogitsOf(model::DocumentModel& model, const PreparedPairs& prepared, const torch::Device& device,
                           torch::Tensor* labels) {
  *labels = model::HostToDevice(torch::tensor(prepared.labels), device, torch::kFloat32);
  return model.PairLogits(model.EmbedBatch(*prepared.sources, device), model.EmbedBatch(*prepared.targets, device));
}

torch::Tensor Logits(model::DocumentModel& model, const data::Corpus& corpus,
                     const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                     int64_t end, const torch::Device& device, torch::Tensor* labels) {
  return PairLogitsOf(model, PreparePairs(model, corpus, pairs, order, begin, end), device, labels);
}

// The labelled negatives of each source, for contrastive fine-tuning, and
// the mined ones after them.
class HardNegatives {
 public:
  explicit HardNegatives(const std::vector<data::LabelledPair>& pairs) {
    for (const data::LabelledPair& p : pairs) {
      if (p.label == 0) labelled_[p.source].push_back(p.target);
    }
    by_source_ = labelled_;
  }
  // The mined negatives of every source, in place of the earlier ones.
  void SetMined(const std::unordered_map<int64_t, std::vector<int64_t>>& mined) {
    mined_ = mined;
    by_source_ = labelled_;
    for (const auto& [source, negatives] : mined) {
      std::vector<int64_t>& pool = by_source_[source];
      for (int64_t n : negatives) {
        if (std::find(pool.begin(), pool.end(), n) == pool.end()) pool.push_back(n);
      }
    }
  }
  const std::unordered_map<int64_t, std::vector<int64_t>>& mined() const { return mined_; }
  // Up to `count` of `source`'s negatives, drawn by (seed, epoch, pair): the
  // same on whichever rank the pair lands.
  std::vector<int64_t> Draw(int64_t source, int64_t count, uint64_t seed, int64_t epoch, int64_t pair) const {
    const auto it = by_source_.find(source);
    if (it == by_source_.end() || count <= 0) return {};
    std::vector<int64_t> drawn = it->second;
    data::KeyedRandom random(seed,
                             {0x68617264ULL /* "hard" */, static_cast<uint64_t>(epoch), static_cast<uint64_t>(pair)});
    random.Shuffle(&drawn);
    drawn.resize(std::min<size_t>(drawn.size(), static_cast<size_t>(count)));
    return drawn;
  }

 private:
  std::unordered_map<int64_t, std::vector<int64_t>> labelled_, mined_, by_source_;
};

std::vector<data::LabelledPair> Related(const std::vector<data::LabelledPair>& pairs) {
  std::vector<data::LabelledPair> related;
  for (const data::LabelledPair& p : pairs) {
    if (p.label == 1) related.push_back(p);
  }
  return related;
}

// Vectors (in float32) of documents given by corpus index.
torch::Tensor EmbedDocuments(model::DocumentModel& model, const data::Corpus& corpus, const std::vector<int64_t>& ids,
                             const torch::Device& device) {
  std::vector<data::Document> documents;
  for (int64_t id : ids) documents.push_back(corpus.Get(id));
  std::vector<const data::Document*> pointers;
  for (const data::Document& d : documents) pointers.push_back(&d);
  return model.Embed(pointers, device).to(torch::kFloat);
}

// The documents of contrastive pairs [begin, end) of `pairs` taken in
// `order`: their sources, targets, and the labelled negatives drawn for them.
struct PairDocuments {
  std::vector<int64_t> sources, targets, negatives;
  std::vector<int64_t> All() const {
    std::vector<int64_t> all = sources;
    all.insert(all.end(), targets.begin(), targets.end());
    all.insert(all.end(), negatives.begin(), negatives.end());
    return all;
  }
};
PairDocuments DrawPairs(const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                        int64_t end, const HardNegatives& hard, int64_t hard_count, uint64_t seed, int64_t epoch) {
  PairDocuments drawn;
  for (int64_t i = begin; i < end; ++i) {
    const data::LabelledPair& p = pairs[order[i]];
    drawn.sources.push_back(p.source);
    drawn.targets.push_back(p.target);
    for (int64_t n : hard.Draw(p.source, hard_count, seed, epoch, order[i])) drawn.negatives.push_back(n);
  }
  return drawn;
}

// A chunk's documents read and batched on the host (any thread), once: the
// gradient cache's re-run embeds the same batch again.
struct PreparedChunk {
  PairDocuments documents;
  std::shared_ptr<const model::DocumentModel::HostBatch> batch;  // sources, targets, negatives
};
PreparedChunk PrepareChunk(const model::DocumentModel& model, const data::Corpus& corpus, PairDocuments documents) {
  std::vector<data::Document> read;
  for (int64_t id : documents.All()) read.push_back(corpus.Get(id));
  std::vector<const data::Document*> pointers;
  for (const data::Document& d : read) pointers.push_back(&d);
  std::shared_ptr<const model::DocumentModel::HostBatch> batch = model.Batch(pointers);
  return {std::move(documents), std::move(batch)};
}

// Their vectors, from one pass of the encoder over all of them.
train::ContrastivePairs EmbedPairs(model::DocumentModel& model, const PreparedChunk& chunk,
                                   const torch::Device& device) {
  const PairDocuments& documents = chunk.documents;
  const torch::Tensor vectors = model.EmbedBatch(*chunk.batch, device).to(torch::kFloat);
  const int64_t b = static_cast<int64_t>(documents.sources.size());
  const int64_t h = static_cast<int64_t>(documents.negatives.size());
  // Corpus indices stay on the host: they cross ranks on the control plane
  // and meet the device once, in the objective.
  const auto ids = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); };
  return {vectors.narrow(0, 0, b), vectors.narrow(0, b, b),     ids(documents.sources),
          ids(documents.targets),  vectors.narrow(0, 2 * b, h), ids(documents.negatives)};
}

// Contrastive fine-tuning over this rank's pairs drawn in chunks
// (ChunkedContrastive, grad_cache.h), each chunk's sources, targets and hard
// negatives embedded in one pass.
Objective ContrastiveOverChunks(model::DocumentModel& model, std::vector<PreparedChunk> chunks,
                                const model::Temperature& temperature, dist::ProcessGroup& group,
                                const RelatedPairs* related) {
  // Owned by the chunk function: Backward() re-runs the chunks after this returns.
  auto prepared = std::make_shared<const std::vector<PreparedChunk>>(std::move(chunks));
  return ChunkedContrastive(
      static_cast<int64_t>(prepared->size()),
      [&model, prepared, device = group.device()](int64_t i) { return EmbedPairs(model, (*prepared)[i], device); },
      temperature, group, related);
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
};

// Contrastive validation: every validation pair at once, in every process
// (validation sets are small; the figure is then the same for any world size).
Validation ValidateContrastive(model::DocumentModel& model, const data::Corpus& corpus,
                               const std::vector<data::LabelledPair>& pairs, const FinetuneOptions& options,
                               double temperature, const torch::Device& device) {
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
  // --drop-related: the validation pairs' own relation, as training uses the training pairs'.
  const RelatedPairs relation(pairs);
  const Objective objective = ContrastiveInOneProcess(all, temperature, options.drop_related ? &relation : nullptr);
  return {objective.value, objective.parts.at("top1")};
}

// Every rank scores its share (i % world == rank) of the validation pairs.
Validation Validate(model::DocumentModel& model, const data::Corpus& corpus,
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

}  // namespace

LoopResult RunFinetuning(const FinetuneOptions& options, dist::ProcessGroup& group) {
  const int rank = group.rank(), world = group.size();
  const torch::Device device = group.device();
  const data::Corpus corpus(options.corpus);

  const TrainingRun::ModelSource source =
      TrainingRun::SourceOfModel(options.run, options.resume, options.init, "finetune", rank);
  io::ModelFolderInfo info;
  if (!source.folder.empty()) {
    info = io::ReadModelFolderInfo(source.folder);
    io::CheckTokenizer(info, corpus, source.folder);
  } else {
    info.config = model::LoadModelConfig(options.model);
    model::SetVocabSize(&info.config, corpus.manifest().vocab_size);
  }
  const bool contrastive = options.loss == "contrastive";
  TORCH_CHECK(contrastive || !options.drop_related,
              "[finetune] --drop-related leaves labelled related documents out of the contrastive loss's "
              "in-batch negatives; --loss bce has none");
  TORCH_CHECK(contrastive || options.loss == "bce", "[finetune] --loss is contrastive or bce, not '", options.loss,
              "'");
  TORCH_CHECK(contrastive || info.config.kind != "sdr",
              "[finetune] SDR has no pair head for --loss bce; fine-tune it with --loss contrastive (its mean "
              "sentence vector) or evaluate its pre-training checkpoint");
  UseDeterministicAlgorithms(options.deterministic);
  torch::manual_seed(options.seed);  // the same initial weights on every rank
  std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(info.config);
  if (!options.init.empty() && !source.resuming) {
    io::LoadFolderWeights(model->module(), options.init, info);
    if (rank == 0) LOG(INFO) << "[finetune] encoder from " << options.init << " (" << info.stage << ")";
  }
  model->module().to(device);
  // What this run's checkpoints and best/ describe: the fine-tuned module alone.
  const std::string pretrained = info.stage;
  info.prefix = "";
  info.weights = "model.pt";
  info.stage = "finetune";
  io::TrainedTokenizer(corpus, &info);

  const std::vector<data::LabelledPair> train_pairs = data::ReadPairs(options.train_pairs, corpus);
  const std::vector<data::LabelledPair> valid_pairs =
      options.valid_pairs.empty() ? std::vector<data::LabelledPair>{} : data::ReadPairs(options.valid_pairs, corpus);
  // What a step draws from: every labelled pair (bce), or the related ones
  // with the negatives beside them (contrastive).
  const std::vector<data::LabelledPair> training = contrastive ? Related(train_pairs) : train_pairs;
  HardNegatives hard(train_pairs);
  const RelatedPairs relation(train_pairs);  // --drop-related
  if (options.mine_negatives > 0) {
    TORCH_CHECK(contrastive,
                "[finetune] --mine-negatives adds negatives to the contrastive loss; bce scores the "
                "labelled pairs alone");
    TORCH_CHECK(options.hard_negatives > 0, "[finetune] --mine-negatives ", options.mine_negatives,
                " with --hard-negatives 0 would mine negatives no pair draws: give --hard-negatives N");
    // Every rank mines the same negatives from the same corpus (no traffic).
    const eval::LexicalIndex index(corpus, options.progress && rank == 0);
    const MinedNegatives mined = MineLexicalNegatives(index, train_pairs, options.mine_negatives, options.mine_margin);
    hard.SetMined(mined.by_source);
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
  TORCH_CHECK(options.refresh_negatives == 0 || options.mine_negatives > 0,
              "[finetune] --refresh-negatives mines --mine-negatives N again from the model: give --mine-negatives");
  const int64_t global_batch = options.batch_size * world;
  TORCH_CHECK(options.grad_cache >= 0, "[finetune] --grad-cache must be 0 (off) or a number of pairs, not ",
              options.grad_cache);
  TORCH_CHECK(options.grad_cache == 0 || contrastive,
              "[finetune] --grad-cache applies to --loss contrastive, whose in-batch negatives make the batch one "
              "loss; bce scores each pair alone: use --accumulation");
  // Pairs a contrastive chunk draws and embeds (the whole batch without gradient caching).
  const int64_t chunk = options.grad_cache > 0 ? options.grad_cache : options.batch_size;
  TORCH_CHECK(static_cast<int64_t>(training.size()) >= global_batch, "[finetune] ", options.train_pairs, " has ",
              training.size(), contrastive ? " related" : "", " pairs, fewer than one global batch of ", global_batch,
              " (ranks x --batch-size)");

  // A learned temperature: log(1 / tau), trained beside the model in an
  // optimizer group of its own (no weight decay, learning rate
  // --temperature-lr on the same schedule), averaged over ranks like every
  // gradient, outside gradient clipping; saved in the run's checkpoints, not
  // in the model folders (embedding does not use it).
  TORCH_CHECK(!options.learn_temperature || contrastive,
              "[finetune] --learn-temperature applies to --loss contrastive; bce has no temperature");
  TORCH_CHECK(options.temperature_lr > 0, "[finetune] --temperature-lr must be positive, not ", options.temperature_lr);
  // A run learns its temperature for its whole life or never: the optimizer
  // has one group more when it does, so its saved state fits only the same
  // choice. Said before the optimizer is built, instead of libtorch's failure
  // to load it.
  if (const nlohmann::json trainer = options.resume ? TrainingRun::LatestTrainerState(options.run) : nullptr;
      trainer.is_object()) {
    const bool learned = trainer.contains("log_scale");
    TORCH_CHECK(learned == options.learn_temperature, "[finetune] ", options.run,
                learned ? " learns its temperature: resume with --learn-temperature"
                        : " was trained at a fixed temperature: resume without --learn-temperature",
                ", or start over with --fresh");
  }
  // Likewise SMITH's sentence level, when it has groups of its own.
  SentenceLevel levels(options, model->config().kind, "finetune");
  torch::Tensor log_scale;
  std::vector<torch::Tensor> parameters = model->module().parameters();
  if (options.learn_temperature) {
    log_scale = torch::full({}, std::log(1.0 / options.temperature), torch::TensorOptions(device)).requires_grad_();
    parameters.push_back(log_scale);
  }
  const model::Temperature temperature =
      log_scale.defined() ? model::Temperature::Learned(log_scale) : model::Temperature(options.temperature);
  dist::GradientSynchronizer synchronizer(parameters, group, TrainingRun::Synchronizer(options));
  synchronizer.BroadcastParameters();
  std::unique_ptr<torch::optim::AdamW> optimizer = levels.MakeOptimizer(model->module(), options.optimizer);
  // Per optimizer group, times the scheduled lr: the two levels', then the
  // temperature's.
  auto lr_factors = [&](int64_t step) {
    std::vector<double> factors = levels.LrFactors(step);
    if (log_scale.defined()) factors.push_back(options.temperature_lr / options.optimizer.lr);
    return factors;
  };
  if (log_scale.defined()) {
    optimizer->add_param_group(torch::optim::OptimizerParamGroup(
        {log_scale}, std::make_unique<torch::optim::AdamWOptions>(
                         torch::optim::AdamWOptions(options.optimizer.lr).weight_decay(0.0))));
  }
  TrainingRun run(options.run, options.keep_last, group);
  run.set_console_lines(!options.progress);
  torch::manual_seed(options.seed + 1 + static_cast<uint64_t>(rank));  // dropout, per rank
  const std::optional<ResumedState> resumed = run.Resume(options.resume, model->module(), *optimizer, info);
  run.RecordConfig(options.config_yaml, resumed.has_value());
  if (resumed && log_scale.defined()) {
    torch::NoGradGuard no_grad;
    log_scale.fill_(resumed->trainer.at("log_scale").get<double>());
  }
  if (resumed && resumed->trainer.contains("mined_negatives")) {  // the lists of the last refresh
    hard.SetMined(resumed->trainer["mined_negatives"].get<std::unordered_map<int64_t, std::vector<int64_t>>>());
  }

  LoopResult result;
  int64_t step = resumed ? resumed->step : 0, epoch = resumed ? resumed->epoch : 0;
  // The global pair position in the epoch: the same on every rank, so any
  // world size resumes from rank 0's.
  int64_t position = resumed ? resumed->trainer.at("positions").at(0).get<int64_t>() : 0;
  BestModel best(options.run, options.patience);
  if (resumed) best.Restore(resumed->trainer);
  if (rank == 0 && !resumed) {
    LOG(INFO) << "[finetune] " << info.config.kind << (options.init.empty() ? " from scratch" : " from " + pretrained)
              << ", " << options.loss << " loss on " << training.size() << " of " << train_pairs.size()
              << " training pairs, " << valid_pairs.size() << " validation pairs";
    if (contrastive && options.drop_related) {
      LOG(INFO) << "[finetune] --drop-related: an in-batch candidate that a training pair labels related to the "
                   "query is left out of its negatives";
    }
    if (info.config.kind == "match_bert" && info.config.match_bert.window_pooling == "maxsim") {
      LOG(INFO) << "[finetune] window_pooling maxsim: the loss reads each document's mean window vector (up to "
                << info.config.match_bert.chunks << " windows, all in one graph); eval and search score by MaxSim";
    }
  }
  auto order = std::make_shared<const std::vector<int64_t>>(EpochOrder(training.size(), options.seed, epoch));
  // The mined-negative lists' version: a micro-batch drawn before a refresh is drawn again.
  uint64_t mined_version = 0;
  // What one micro-step trains on, drawn, read and batched on the host. The
  // loader thread builds the next one while the device runs this one (the
  // draws are pure functions of the epoch, the position and the lists, so the
  // batches are the same as built in place); the main thread only embeds.
  struct MicroBatch {
    int64_t epoch = 0, position = 0;    // where it was drawn
    uint64_t mined = 0;                 // from which lists
    std::vector<PreparedChunk> chunks;  // contrastive
    PreparedPairs pairs;                // bce
    std::vector<int64_t> documents;     // corpus indices, for the non-finite report
  };
  const auto build = [&, chunk](int64_t at_epoch, int64_t at, std::shared_ptr<const std::vector<int64_t>> in_order,
                                uint64_t mined) {
    MicroBatch b{at_epoch, at, mined, {}, {}, {}};
    const int64_t begin = at + rank * options.batch_size, end = begin + options.batch_size;
    if (contrastive) {
      for (int64_t from = begin; from < end; from += chunk) {
        b.chunks.push_back(PrepareChunk(*model, corpus,
                                        DrawPairs(training, *in_order, from, std::min(end, from + chunk), hard,
                                                  options.hard_negatives, options.seed, at_epoch)));
        const std::vector<int64_t> drawn = b.chunks.back().documents.All();
        b.documents.insert(b.documents.end(), drawn.begin(), drawn.end());
      }
    } else {
      b.pairs = PreparePairs(*model, corpus, training, *in_order, begin, end);
      b.documents = b.pairs.documents;
    }
    return b;
  };
  std::future<MicroBatch> ahead;  // the loader thread's next micro-batch
  // Whether the pairs left in this epoch's order hold no more global batch:
  // the next micro-step then starts the next epoch at position 0.
  const auto epoch_ends = [&](int64_t at) { return at + global_batch > static_cast<int64_t>(training.size()); };

  console::ProgressBar bar("[finetune] step", options.steps, "steps", "pairs", rank == 0 && options.progress);
  bar.Resume(step);
  model->module().train();
  PhaseTimer timer(options.time_split, device);  // "data": the wait for the loader thread's batch
  StepProfiler profiler(options, "finetune", rank, /*start_step=*/step, device);
  int64_t timed_from = step;
  while (step < options.steps && !result.stopped_early && !result.interrupted) {
    profiler.Begin(step + 1);
    levels.BeginStep(step);
    double loss = 0;
    bool finite = true;
    std::map<std::string, double> parts;
    for (int64_t micro = 0; micro < options.accumulation; ++micro) {
      if (epoch_ends(position)) {
        order = std::make_shared<const std::vector<int64_t>>(EpochOrder(training.size(), options.seed, ++epoch));
        position = 0;
      }
      const int64_t at = position;
      position += global_batch;
      std::optional<MicroBatch> taken;
      if (ahead.valid()) taken = ahead.get();  // rethrows what the loader thread threw
      if (!taken || taken->epoch != epoch || taken->position != at || taken->mined != mined_version) {
        taken = build(epoch, at, order, mined_version);  // the first, or one drawn before a refresh
      }
      MicroBatch& batch = *taken;
      timer.Mark("data");
      {
        // The next micro-step's, on the loader thread, while this one runs.
        int64_t next_epoch = epoch, next_at = position;
        std::shared_ptr<const std::vector<int64_t>> next_order = order;
        if (epoch_ends(next_at)) {
          ++next_epoch;
          next_at = 0;
          next_order = nullptr;  // that epoch's order, made on the thread
        }
        ahead = std::async(std::launch::async,
                           [&build, &training, &options, next_epoch, next_at, next_order, mined = mined_version]() {
                             return build(next_epoch, next_at,
                                          next_order ? next_order
                                                     : std::make_shared<const std::vector<int64_t>>(
                                                           EpochOrder(training.size(), options.seed, next_epoch)),
                                          mined);
                           });
      }
      torch::Tensor labels;
      const std::vector<int64_t>& documents = batch.documents;
      std::optional<Objective> computed;
      {
        const Autocast autocast(device, options.precision);
        if (contrastive) {
          computed = ContrastiveOverChunks(*model, std::move(batch.chunks), temperature, group,
                                           options.drop_related ? &relation : nullptr);
        } else {
          const torch::Tensor logits = PairLogitsOf(*model, batch.pairs, device, &labels);
          computed = Siamese(logits.to(torch::kFloat), labels, group);
        }
      }
      const Objective& objective = *computed;
      finite = finite && TrainingRun::CheckFinite(objective.value, step, options.on_nonfinite, corpus, documents);
      timer.Mark("forward");
      const bool last_micro = micro + 1 == options.accumulation;
      Backward(objective, 1.0 / static_cast<double>(options.accumulation),
               [&](bool last) { synchronizer.Prepare(/*sync=*/last_micro && last); });
      timer.Mark("backward");
      loss += objective.value / options.accumulation;
      for (const auto& [name, value] : objective.parts) parts[name] += value / options.accumulation;
    }
    if (finite) {
      TrainingRun::Step(synchronizer, model->module(), *optimizer, options.optimizer, step, &timer, lr_factors(step),
                        levels.Frozen(step));
    } else {
      synchronizer.Finalize();
      optimizer->zero_grad();
    }
    ++step;
    // The loader thread done before anything else reads the corpus or the lists.
    if (ahead.valid()) ahead.wait();
    // At every multiple, the last step too: a run stopped there resumes with the lists it would have used.
    if (options.refresh_negatives > 0 && step % options.refresh_negatives == 0) {
      const MinedNegatives mined = MineFromTheModel(*model, corpus, train_pairs, options, group);
      hard.SetMined(mined.by_source);
      ++mined_version;
      if (rank == 0) {
        LOG(INFO) << "[finetune] step " << step << ": negatives mined again from the model's vectors of "
                  << corpus.num_documents() << " documents (left out: " << mined.dropped_related
                  << " labelled related, " << mined.dropped_margin << " above the best positive by more than "
                  << options.mine_margin << ")";
      }
    }
    const char* score = contrastive ? "top1" : "accuracy";
    bar.SetStatus("loss " + std::to_string(loss).substr(0, 6) + "  " + score + " " +
                  std::to_string(parts[score]).substr(0, 5));
    bar.Add(1, global_batch * options.accumulation);

    if (step % options.log_every == 0 || step == options.steps) {
      parts["loss"] = loss;
      parts["lr"] = LearningRate(options.optimizer, step - 1);
      parts["epoch"] = static_cast<double>(epoch);
      parts.merge(timer.Take(step - timed_from));
      timed_from = step;
      run.Log(step, "train", parts);
    }
    const bool last = step == options.steps;
    result.interrupted = run.StopRequested(step);
    if (!valid_pairs.empty() && options.validate_every > 0 && (step % options.validate_every == 0 || last)) {
      const Autocast autocast(device, options.precision);  // validated as trained
      const Validation v = contrastive
                               ? ValidateContrastive(*model, corpus, valid_pairs, options, temperature.value(), device)
                               : Validate(*model, corpus, valid_pairs, options.batch_size, group);
      run.Log(step, "valid", {{"loss", v.loss}, {contrastive ? "top1" : "accuracy", v.accuracy}});
      result.stopped_early = best.Update(v.loss, step, model->module(), info, group);
    }
    if (step % options.checkpoint_every == 0 || last || result.stopped_early || result.interrupted) {
      nlohmann::json trainer = {{"options", OptionsJson(options)}, {"validation", best.ToJson()}};
      if (log_scale.defined()) trainer["log_scale"] = log_scale.item<double>();  // float32, exact in a double
      levels.Save(&trainer);
      if (options.refresh_negatives > 0) trainer["mined_negatives"] = hard.mined();
      run.Save(step, epoch, position, model->module(), *optimizer, info, trainer);
    }
    timer.Mark("other");  // progress, logging, validation, checkpoints
    profiler.End(step);
  }
  bar.Finish();
  result.step = step;
  result.best_step = best.best_step();
  result.best_valid_loss = best.best_loss();
  return result;
}

}  // namespace docmatch::train
