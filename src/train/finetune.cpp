// The fine-tuning loop: each rank's slice of an epoch's pair permutation, the
// Siamese objective, validation and the best model, resumable (finetune.h).
#include "train/finetune.h"

#include <glog/logging.h>

#include "console/progress.h"
#include "data/batches/pairs.h"
#include "data/corpus/random.h"
#include "dist/gradient_synchronizer.h"
#include "model/document_model.h"
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
               {"model", o.model}});
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
torch::Tensor Logits(model::DocumentModel& model, const data::Corpus& corpus,
                     const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                     int64_t end, const torch::Device& device, torch::Tensor* labels, std::vector<int64_t>* documents) {
  std::vector<data::Document> sources, targets;
  std::vector<float> y;
  for (int64_t i = begin; i < end; ++i) {
    const data::LabelledPair& p = pairs[order[i]];
    sources.push_back(corpus.Get(p.source));
    targets.push_back(corpus.Get(p.target));
    y.push_back(p.label);
    if (documents) documents->insert(documents->end(), {p.source, p.target});
  }
  std::vector<const data::Document*> a, b;
  for (size_t i = 0; i < sources.size(); ++i) {
    a.push_back(&sources[i]);
    b.push_back(&targets[i]);
  }
  *labels = torch::tensor(y).to(device);
  return model.PairLogits(model.Embed(a, device), model.Embed(b, device));
}

struct Validation {
  double loss = 0, accuracy = 0;
};

// Every rank scores its share (i % world == rank) of the validation pairs.
Validation Validate(model::DocumentModel& model, const data::Corpus& corpus,
                    const std::vector<data::LabelledPair>& pairs, int64_t batch_size, dist::Communicator& communicator,
                    const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.module().eval();
  std::vector<int64_t> mine;
  for (size_t i = communicator.rank(); i < pairs.size(); i += communicator.size()) mine.push_back(i);
  double loss = 0, correct = 0;
  for (size_t begin = 0; begin < mine.size(); begin += batch_size) {
    const int64_t end = std::min(mine.size(), begin + batch_size);
    torch::Tensor labels;
    const torch::Tensor logits = Logits(model, corpus, pairs, mine, begin, end, device, &labels, nullptr);
    const auto [bce, right] = PairSums(logits, labels);
    loss += bce.item<double>();
    correct += right.item<double>();
  }
  model.module().train();
  torch::Tensor totals = torch::tensor({loss, correct}, torch::kFloat64).to(device);
  communicator.AllReduce(totals);
  totals = totals.cpu();
  const double n = static_cast<double>(pairs.size());
  return {totals[0].item<double>() / n, totals[1].item<double>() / n};
}

}  // namespace

LoopResult RunFinetuning(const FinetuneOptions& options, dist::Communicator& communicator,
                         const torch::Device& device) {
  const int rank = communicator.rank(), world = communicator.size();
  const data::Corpus corpus(options.corpus);

  io::ModelFolderInfo info;
  if (!options.init.empty()) {
    info = io::ReadModelFolderInfo(options.init);
    io::CheckTokenizer(info, corpus, options.init);
  } else {
    info.config = model::LoadModelConfig(options.model);
    model::SetVocabSize(&info.config, corpus.manifest().vocab_size);
  }
  TORCH_CHECK(info.config.kind != "sdr",
              "[finetune] SDR is self-supervised: it has no pair fine-tuning (evaluate its pre-training checkpoint)");
  torch::manual_seed(options.seed);  // the same initial weights on every rank
  std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(info.config);
  if (!options.init.empty()) {
    io::LoadFolderWeights(model->module(), options.init, info);
    if (rank == 0) LOG(INFO) << "[finetune] encoder from " << options.init << " (" << info.stage << ")";
  }
  model->module().to(device);
  // What this run's checkpoints and best/ describe: the fine-tuned module alone.
  const std::string pretrained = info.stage;
  info.prefix = "";
  info.weights = "model.pt";
  info.stage = "finetune";
  info.tokenizer_hash = corpus.manifest().tokenizer_hash;
  info.tokenizer = "";

  const std::vector<data::LabelledPair> train_pairs = data::ReadPairs(options.train_pairs, corpus);
  const std::vector<data::LabelledPair> valid_pairs =
      options.valid_pairs.empty() ? std::vector<data::LabelledPair>{} : data::ReadPairs(options.valid_pairs, corpus);
  const int64_t global_batch = options.batch_size * world;
  TORCH_CHECK(static_cast<int64_t>(train_pairs.size()) >= global_batch, "[finetune] ", options.train_pairs, " has ",
              train_pairs.size(), " pairs, fewer than one global batch of ", global_batch, " (ranks x --batch-size)");

  dist::GradientSynchronizer synchronizer(model->module().parameters(), communicator);
  synchronizer.BroadcastParameters();
  std::unique_ptr<torch::optim::AdamW> optimizer = MakeAdamW(model->module(), options.optimizer);
  TrainingRun run(options.run, options.keep_last, communicator, device);
  torch::manual_seed(options.seed + 1 + static_cast<uint64_t>(rank));  // dropout, per rank
  const std::optional<ResumedState> resumed = run.Resume(options.resume, model->module(), *optimizer);

  LoopResult result;
  int64_t step = resumed ? resumed->step : 0, epoch = resumed ? resumed->epoch : 0;
  // The global pair position in the epoch: the same on every rank, so any
  // world size resumes from rank 0's.
  int64_t position = resumed ? resumed->trainer.at("positions").at(0).get<int64_t>() : 0;
  BestModel best(options.run, options.patience);
  if (resumed) best.Restore(resumed->trainer);
  if (rank == 0 && !resumed) {
    LOG(INFO) << "[finetune] " << info.config.kind << (options.init.empty() ? " from scratch" : " from " + pretrained)
              << ", " << train_pairs.size() << " training pairs, " << valid_pairs.size() << " validation pairs";
  }
  std::vector<int64_t> order = EpochOrder(train_pairs.size(), options.seed, epoch);

  console::ProgressBar bar("[finetune] step", options.steps, "steps", "pairs", rank == 0 && options.progress);
  bar.Add(step);
  model->module().train();
  PhaseTimer timer(options.time_split, device);  // pair batches are built inside "forward"
  int64_t timed_from = step;
  while (step < options.steps && !result.stopped_early && !result.interrupted) {
    double loss = 0;
    bool finite = true;
    std::map<std::string, double> parts;
    for (int64_t micro = 0; micro < options.accumulation; ++micro) {
      if (position + global_batch > static_cast<int64_t>(order.size())) {
        order = EpochOrder(train_pairs.size(), options.seed, ++epoch);
        position = 0;
      }
      const int64_t begin = position + rank * options.batch_size;
      position += global_batch;
      synchronizer.Prepare(/*sync=*/micro + 1 == options.accumulation);
      torch::Tensor labels;
      std::vector<int64_t> documents;
      std::optional<Objective> computed;
      {
        const Autocast autocast(device, options.precision);
        const torch::Tensor logits =
            Logits(*model, corpus, train_pairs, order, begin, begin + options.batch_size, device, &labels, &documents);
        computed = Siamese(logits.to(torch::kFloat), labels, communicator);
      }
      const Objective& objective = *computed;
      finite = finite && TrainingRun::CheckFinite(objective.value, step, options.on_nonfinite, corpus, documents);
      timer.Mark("forward");
      (objective.loss / static_cast<double>(options.accumulation)).backward();
      timer.Mark("backward");
      loss += objective.value / options.accumulation;
      for (const auto& [name, value] : objective.parts) parts[name] += value / options.accumulation;
    }
    if (finite) {
      TrainingRun::Step(synchronizer, model->module(), *optimizer, options.optimizer, step, &timer);
    } else {
      synchronizer.Finalize();
      optimizer->zero_grad();
    }
    ++step;
    bar.SetStatus("loss " + std::to_string(loss).substr(0, 6) + "  accuracy " +
                  std::to_string(parts["accuracy"]).substr(0, 5));
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
      const Validation v = Validate(*model, corpus, valid_pairs, options.batch_size, communicator, device);
      run.Log(step, "valid", {{"loss", v.loss}, {"accuracy", v.accuracy}});
      result.stopped_early = best.Update(v.loss, step, model->module(), info, communicator);
    }
    if (step % options.checkpoint_every == 0 || last || result.stopped_early || result.interrupted) {
      nlohmann::json trainer = {{"options", OptionsJson(options)}, {"validation", best.ToJson()}};
      run.Save(step, epoch, position, model->module(), *optimizer, info, trainer);
    }
    timer.Mark("other");  // progress, logging, validation, checkpoints
  }
  bar.Finish();
  result.step = step;
  result.best_step = best.best_step();
  result.best_valid_loss = best.best_loss();
  return result;
}

}  // namespace docmatch::train
