#include "train/training_run.h"

#include <glog/logging.h>

namespace docmatch::train {

nlohmann::json LoopOptionsJson(const LoopOptions& o) {
  return {{"batch_size", o.batch_size},
          {"accumulation", o.accumulation},
          {"steps", o.steps},
          {"lr", o.optimizer.lr},
          {"warmup_steps", o.optimizer.warmup_steps},
          {"total_steps", o.optimizer.total_steps},
          {"weight_decay", o.optimizer.weight_decay},
          {"max_grad_norm", o.optimizer.max_grad_norm},
          {"seed", o.seed}};
}

TrainingRun::TrainingRun(const std::string& run, int keep_last, dist::Communicator& communicator,
                         const torch::Device& device)
    : communicator_(communicator), device_(device), checkpoints_(run, keep_last) {
  if (communicator.rank() == 0) {
    events_ = std::make_unique<EventWriter>(run + "/tensorboard");
    metrics_.open(run + "/metrics.jsonl", std::ios::app);
  }
}

std::optional<ResumedState> TrainingRun::Resume(bool resume, torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer) {
  const auto latest = resume ? checkpoints_.Latest() : std::nullopt;
  if (!latest) return std::nullopt;
  const int rank = communicator_.rank(), world = communicator_.size();
  ResumedState state;
  state.folder = *latest;
  LoadModule(module, *latest + "/model.pt");
  torch::load(optimizer, *latest + "/optimizer.pt");
  std::ifstream(*latest + "/trainer.json") >> state.trainer;
  state.step = state.trainer.at("step").get<int64_t>();
  state.epoch = state.trainer.at("epoch").get<int64_t>();
  const auto positions = state.trainer.at("positions").get<std::vector<int64_t>>();
  if (static_cast<int>(positions.size()) == world) {
    state.position = positions[rank];
    std::vector<torch::Tensor> generators;
    torch::load(generators, *latest + "/rng.pt");
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(generators.at(rank));
  } else {
    // Another world size: restart this epoch's shares where the old ranks
    // were on average; the data sequence changes from here on.
    int64_t consumed = 0;
    for (int64_t p : positions) consumed += p;
    state.position = consumed / world;
    if (rank == 0) {
      LOG(WARNING) << "[ckpt] resuming a " << positions.size() << "-rank run on " << world
                   << " ranks: cursors re-sharded, the data sequence differs from an uninterrupted run";
    }
  }
  if (rank == 0) LOG(INFO) << "[ckpt] resumed from " << *latest << " at step " << state.step;
  return state;
}

std::string TrainingRun::Save(int64_t step, int64_t epoch, int64_t position, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer, const ModelFolderInfo& info,
                              nlohmann::json trainer) {
  const int world = communicator_.size();
  const std::vector<int64_t> positions = communicator_.ExchangeCounts(position, device_);
  // Every rank's generator state travels to rank 0 (on the run's device, so
  // the NCCL backend can carry it too).
  const torch::Tensor state = at::detail::getDefaultCPUGenerator().get_state();
  const torch::Tensor all_states = communicator_.AllGather(state.unsqueeze(0).to(device_)).cpu();
  std::string written;
  if (communicator_.rank() == 0) {
    trainer["step"] = step;
    trainer["epoch"] = epoch;
    trainer["world_size"] = world;
    trainer["positions"] = positions;
    written = checkpoints_.Save(step, [&](const std::string& folder) {
      SaveModule(module, folder + "/model.pt");
      WriteModelFolderInfo(folder, info);
      torch::save(optimizer, folder + "/optimizer.pt");
      std::vector<torch::Tensor> generators;
      for (int r = 0; r < world; ++r) generators.push_back(all_states[r].clone());
      torch::save(generators, folder + "/rng.pt");
      std::ofstream(folder + "/trainer.json") << trainer.dump(2) << "\n";
    });
  }
  communicator_.Barrier();  // nobody runs ahead of a checkpoint being written
  return written;
}

void TrainingRun::Log(int64_t step, const std::string& prefix, const std::map<std::string, double>& values) {
  if (!events_) return;
  nlohmann::json line = {{"step", step}};
  for (const auto& [name, value] : values) {
    line[prefix + "/" + name] = value;
    events_->Scalar(prefix + "/" + name, step, value);
  }
  metrics_ << line.dump() << "\n" << std::flush;
  events_->Flush();
}

double TrainingRun::Step(dist::GradientSynchronizer& synchronizer, torch::nn::Module& module,
                         torch::optim::Optimizer& optimizer, const OptimizerOptions& options, int64_t step) {
  synchronizer.Finalize();
  if (options.max_grad_norm > 0) torch::nn::utils::clip_grad_norm_(module.parameters(), options.max_grad_norm);
  const double lr = LearningRate(options, step);
  SetLearningRate(optimizer, lr);
  optimizer.step();
  optimizer.zero_grad();
  return lr;
}

bool TrainingRun::CheckFinite(double value, int64_t step, const std::string& policy, const data::Corpus& corpus,
                              const std::vector<int64_t>& documents) {
  if (std::isfinite(value)) return true;
  std::string ids;
  for (int64_t i : documents) ids += (ids.empty() ? "" : ", ") + corpus.Get(i).id;
  const std::string message = "[train] loss is " + std::to_string(value) + " at step " + std::to_string(step + 1) +
                              "; this rank's documents: " + ids;
  if (policy != "skip") throw std::runtime_error(message + " (--on-nonfinite skip drops such steps instead)");
  LOG(WARNING) << message << ": step skipped";
  return false;
}

}  // namespace docmatch::train
