#include "cli/training_flags.h"

#include "dist/runtime.h"

namespace docmatch::cli {

void AddDistributedFlags(CLI::App* app, DistributedFlags* flags) {
  app->add_option("--device", flags->device, "cpu, cuda or auto")->capture_default_str();
  app->add_option("--backend", flags->backend, "auto, mpi or nccl")->capture_default_str();
  app->add_option("--log-dir", flags->log_dir, "every rank also writes its whole log to <dir>/rank-<r>.log.*");
}

int RunDistributed(const DistributedFlags& flags,
                   const std::function<int(dist::Communicator& communicator, const torch::Device& device)>& body) {
  dist::MpiRuntime mpi(nullptr, nullptr);
  dist::SetUpRankLogging(mpi.rank(), flags.log_dir);
  return dist::RunOnAllRanks([&] {
    const dist::Placement placement = dist::DiscoverPlacement(flags.device);
    std::unique_ptr<dist::Communicator> communicator = dist::MakeCommunicator(flags.backend, placement.device);
    return body(*communicator, placement.device);
  });
}

void AddOptimizerFlags(CLI::App* app, train::OptimizerOptions* o) {
  app->add_option("--lr", o->lr, "peak learning rate")->capture_default_str();
  app->add_option("--warmup-steps", o->warmup_steps, "linear warm-up steps")->capture_default_str();
  app->add_option("--decay-steps", o->total_steps, "the learning rate reaches 0 here")->capture_default_str();
  app->add_option("--weight-decay", o->weight_decay, "AdamW weight decay")->capture_default_str();
  app->add_option("--clip", o->max_grad_norm, "gradient norm clip (0 = off)")->capture_default_str();
}

}  // namespace docmatch::cli
