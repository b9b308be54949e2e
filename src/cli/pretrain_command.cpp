// `docmatch pretrain`: SMITH-WP / SMITH-WP+SP pre-training (train/trainer.h),
// one process or many under mpirun.
#include <iostream>

#include "cli/commands.h"
#include "dist/communicator.h"
#include "dist/runtime.h"
#include "train/trainer.h"

namespace docmatch::cli {

Command AddPretrainCommand(CLI::App* app) {
  CLI::App* sub =
      app->add_subcommand("pretrain",
                          "Pre-train SMITH on a prepared corpus: masked word LM (WP) plus masked\n"
                          "sentence-block prediction (WP+SP). Run it as is, or under mpirun for data\n"
                          "parallelism (each rank reads its share; gradients are averaged). Checkpoints\n"
                          "go to --run/step-<N>/ with 'latest'; running the same command again resumes.\n"
                          "  docmatch pretrain --corpus corpora/manpages --model configs/models/smith-tiny.yaml\n"
                          "  mpirun -np 2 docmatch pretrain --config configs/pretrain-smith-tiny.yaml");
  auto o = std::make_shared<train::PretrainOptions>();
  auto backend = std::make_shared<std::string>("auto");
  auto no_progress = std::make_shared<bool>(false);
  auto fresh = std::make_shared<bool>(false);
  auto log_dir = std::make_shared<std::string>();
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--model", o->model, "model YAML (configs/models/, kind: smith)")->capture_default_str();
  sub->add_option("--objective", o->objective, "wp (word LM), wp+sp (plus sentence blocks) or docsplit")
      ->capture_default_str()
      ->check(CLI::IsMember({"wp", "wp+sp", "docsplit"}));
  sub->add_option("--run", o->run, "checkpoint folder of this run")->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "documents per rank per micro-step")->capture_default_str();
  sub->add_option("--accumulation", o->accumulation, "micro-steps per optimizer step")->capture_default_str();
  sub->add_option("--steps", o->steps, "optimizer steps in all")->capture_default_str();
  sub->add_option("--lr", o->optimizer.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--warmup-steps", o->optimizer.warmup_steps, "linear warm-up steps")->capture_default_str();
  sub->add_option("--decay-steps", o->optimizer.total_steps, "the learning rate reaches 0 here")->capture_default_str();
  sub->add_option("--weight-decay", o->optimizer.weight_decay, "AdamW weight decay")->capture_default_str();
  sub->add_option("--clip", o->optimizer.max_grad_norm, "gradient norm clip (0 = off)")->capture_default_str();
  sub->add_option("--seed", o->seed, "weights, data order and masks")->capture_default_str();
  sub->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints")->capture_default_str();
  sub->add_option("--keep-last", o->keep_last, "checkpoints kept")->capture_default_str();
  sub->add_option("--log-every", o->log_every, "steps between metric lines")->capture_default_str();
  sub->add_option("--device", o->device, "cpu, cuda or auto")->capture_default_str();
  sub->add_option("--backend", *backend, "auto, mpi or nccl")->capture_default_str();
  sub->add_flag("--fresh", *fresh, "ignore existing checkpoints in --run (default: resume from latest)");
  sub->add_flag("--no-progress", *no_progress, "no progress bar");
  sub->add_option("--log-dir", *log_dir, "every rank also writes its whole log to <dir>/rank-<r>.log.*");
  return {sub, [o, backend, no_progress, fresh, log_dir] {
            o->progress = !*no_progress;
            o->resume = !*fresh;
            dist::MpiRuntime mpi(nullptr, nullptr);
            dist::SetUpRankLogging(mpi.rank(), *log_dir);
            return dist::RunOnAllRanks([&] {
              const dist::Placement placement = dist::DiscoverPlacement(o->device);
              std::unique_ptr<dist::Communicator> communicator = dist::MakeCommunicator(*backend, placement.device);
              const int64_t step = train::RunPretraining(*o, *communicator, placement.device);
              if (communicator->rank() == 0)
                std::cout << "[train] done at step " << step << ", " << o->run << std::endl;
              return 0;
            });
          }};
}

}  // namespace docmatch::cli
