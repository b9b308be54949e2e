#include "train/trainer.h"

#include <glog/logging.h>

#include <filesystem>
#include <fstream>

#include "data/batch_loader.h"
#include "data/blocks.h"
#include "data/docsplit.h"
#include "data/progress.h"
#include "dist/gradient_synchronizer.h"
#include "model/config.h"
#include "model/smith.h"
#include "train/checkpoint.h"
#include "train/objectives.h"
#include "train/tensorboard.h"

namespace docmatch::train {
namespace fs = std::filesystem;
namespace {

nlohmann::json OptionsJson(const PretrainOptions& o) {
  return {{"corpus", o.corpus},
          {"model", o.model},
          {"objective", o.objective},
          {"batch_size", o.batch_size},
          {"accumulation", o.accumulation},
          {"steps", o.steps},
          {"lr", o.optimizer.lr},
          {"warmup_steps", o.optimizer.warmup_steps},
          {"total_steps", o.optimizer.total_steps},
          {"weight_decay", o.optimizer.weight_decay},
          {"max_grad_norm", o.optimizer.max_grad_norm},
          {"seed", o.seed}};
}

}  // namespace

int64_t RunPretraining(const PretrainOptions& options, dist::Communicator& communicator, const torch::Device& device) {
  const int rank = communicator.rank(), world = communicator.size();
  TORCH_CHECK(options.objective == "wp" || options.objective == "wp+sp" || options.objective == "docsplit",
              "[train] unknown objective '", options.objective, "' (wp, wp+sp, docsplit)");
  const bool docsplit = options.objective == "docsplit";
  auto corpus = std::make_shared<const data::Corpus>(options.corpus);
  model::SmithConfig config = model::LoadModelConfig(options.model).smith;
  config.vocab_size = corpus->manifest().vocab_size;

  torch::manual_seed(options.seed);  // the same initial weights on every rank
  model::SmithPretraining model(model::SmithEncoder(config), config);
  model->to(device);
  dist::GradientSynchronizer synchronizer(model->parameters(), communicator);
  synchronizer.BroadcastParameters();
  std::unique_ptr<torch::optim::AdamW> optimizer = MakeAdamW(*model, options.optimizer);
  CheckpointDirectory checkpoints(options.run, options.keep_last);

  int64_t step = 0;
  data::StreamCursor cursor{options.seed, 0, rank, world, 0};
  // Dropout draws: a per-rank stream, saved and restored with checkpoints.
  torch::manual_seed(options.seed + 1 + static_cast<uint64_t>(rank));
  if (const auto latest = options.resume ? checkpoints.Latest() : std::nullopt) {
    LoadModule(*model, *latest + "/model.pt");
    torch::load(*optimizer, *latest + "/optimizer.pt");
    nlohmann::json state;
    std::ifstream(*latest + "/trainer.json") >> state;
    step = state.at("step").get<int64_t>();
    cursor.epoch = state.at("epoch").get<int64_t>();
    const auto positions = state.at("positions").get<std::vector<int64_t>>();
    if (static_cast<int>(positions.size()) == world) {
      cursor.position = positions[rank];
      std::vector<torch::Tensor> generators;
      torch::load(generators, *latest + "/rng.pt");
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(generators.at(rank));
    } else {
      // Another world size: restart this epoch's shares where the old ranks
      // were on average; the document sequence changes from here on.
      int64_t consumed = 0;
      for (int64_t p : positions) consumed += p;
      cursor.position = consumed / world;
      if (rank == 0) {
        LOG(WARNING) << "[ckpt] resuming a " << positions.size() << "-rank run on " << world
                     << " ranks: cursors re-sharded, the document sequence differs from an uninterrupted run";
      }
    }
    if (rank == 0) LOG(INFO) << "[ckpt] resumed from " << *latest << " at step " << step;
  }

  data::StreamOptions stream_options;
  stream_options.seed = options.seed;
  stream_options.rank = rank;
  stream_options.world_size = world;
  auto stream = std::make_shared<data::ShardStream>(corpus, stream_options);
  stream->StartEpoch(cursor.epoch, std::min(cursor.position, stream->epoch_size()));
  data::MaskOptions masks;
  masks.vocab_size = config.vocab_size;
  masks.seed = options.seed;
  masks.masked_blocks = options.objective == "wp+sp" ? 2 : 0;
  const data::BlockOptions blocks{config.block_length, config.max_blocks};
  auto builder = [&](const std::vector<const data::Document*>& docs, int64_t epoch) {
    return docsplit ? data::BuildDocSplitBatch(docs, blocks, masks, options.seed, epoch)
                    : data::BuildBlockBatch(docs, blocks, &masks, epoch);
  };
  auto loader = std::make_unique<data::BatchLoader<data::BlockBatch>>(stream, options.batch_size, builder);
  TORCH_CHECK(stream->epoch_size() >= options.batch_size, "[train] rank ", rank, " gets ", stream->epoch_size(),
              " documents per epoch, fewer than one batch of ", options.batch_size,
              ": use a smaller --batch-size or fewer ranks");

  std::unique_ptr<EventWriter> events;
  std::ofstream metrics;
  if (rank == 0) {
    events = std::make_unique<EventWriter>(options.run + "/tensorboard");
    metrics.open(options.run + "/metrics.jsonl", std::ios::app);
  }
  data::ProgressBar bar("[train] step", options.steps, "steps", "docs", rank == 0 && options.progress);
  bar.Add(step);
  while (step < options.steps) {
    double loss_sum = 0;
    std::map<std::string, double> parts;
    int64_t documents = 0;
    for (int64_t micro = 0; micro < options.accumulation; ++micro) {
      std::optional<data::BlockBatch> batch = loader->Next();
      if (!batch) {  // end of this rank's epoch: the next one
        stream->StartEpoch(stream->epoch() + 1);
        loader = std::make_unique<data::BatchLoader<data::BlockBatch>>(stream, options.batch_size, builder);
        batch = loader->Next();
      }
      synchronizer.Prepare(/*sync=*/micro + 1 == options.accumulation);
      const model::BlockTensors tensors = model::ToTensors(*batch, device);
      const Objective objective = docsplit
                                      ? DocSplit(model, tensors, communicator)
                                      : SmithPretraining(model, tensors, options.objective == "wp+sp", communicator);
      if (!std::isfinite(objective.value)) {
        std::ostringstream ids;
        for (int64_t i : batch->document_index) ids << " " << i;
        throw std::runtime_error("[train] loss is " + std::to_string(objective.value) + " at step " +
                                 std::to_string(step) + "; documents of this rank's batch:" + ids.str());
      }
      (objective.loss / static_cast<double>(options.accumulation)).backward();
      loss_sum += objective.value / options.accumulation;
      for (const auto& [name, value] : objective.parts) parts[name] += value / options.accumulation;
      documents += (docsplit ? batch->B / 2 : batch->B) * world;
    }
    synchronizer.Finalize();
    if (options.optimizer.max_grad_norm > 0) {
      torch::nn::utils::clip_grad_norm_(model->parameters(), options.optimizer.max_grad_norm);
    }
    const double lr = LearningRate(options.optimizer, step);
    SetLearningRate(*optimizer, lr);
    optimizer->step();
    optimizer->zero_grad();
    ++step;
    bar.Add(1, documents);

    if (rank == 0 && (step % options.log_every == 0 || step == options.steps)) {
      nlohmann::json line = {{"step", step}, {"loss", loss_sum}, {"lr", lr}, {"epoch", stream->epoch()}};
      for (const auto& [name, value] : parts) line[name] = value;
      metrics << line.dump() << "\n" << std::flush;
      events->Scalar("train/loss", step, loss_sum);
      events->Scalar("train/lr", step, lr);
      for (const auto& [name, value] : parts) events->Scalar("train/" + name, step, value);
      events->Flush();
    }
    if (step % options.checkpoint_every == 0 || step == options.steps) {
      const data::StreamCursor now = loader->cursor();
      // Cursors differ only in rank and position: gather the positions.
      const std::vector<int64_t> positions = communicator.ExchangeCounts(now.position, device);
      // Every rank's generator state travels to rank 0, which writes the checkpoint.
      const torch::Tensor state = at::detail::getDefaultCPUGenerator().get_state();
      // On the run's device, so the NCCL backend can carry it too.
      const torch::Tensor all_states = communicator.AllGather(state.unsqueeze(0).to(device)).cpu();
      if (rank == 0) {
        checkpoints.Save(step, [&](const std::string& folder) {
          SaveModule(*model, folder + "/model.pt");
          torch::save(*optimizer, folder + "/optimizer.pt");
          std::vector<torch::Tensor> generators;
          for (int r = 0; r < world; ++r) generators.push_back(all_states[r].clone());
          torch::save(generators, folder + "/rng.pt");
          nlohmann::json trainer = {{"step", step},
                                    {"epoch", now.epoch},
                                    {"world_size", world},
                                    {"positions", positions},
                                    {"options", OptionsJson(options)}};
          std::ofstream(folder + "/trainer.json") << trainer.dump(2) << "\n";
        });
      }
      communicator.Barrier();  // nobody runs ahead of a checkpoint being written
    }
  }
  bar.Finish();
  return step;
}

}  // namespace docmatch::train
