// `docmatch finetune`: Siamese pair fine-tuning (train/finetune.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/training_flags.h"
#include "train/finetune.h"

namespace docmatch::cli {

Command AddFinetuneCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "finetune",
      "Fine-tune a document matcher on labelled pairs ({\"source\", \"target\", \"label\"}\n"
      "JSONL, ids of the corpus). Start from a pre-training checkpoint's encoder with\n"
      "--init (SMITH-WP, -WP+SP, DocSplit) or from scratch with --model (SMITH-NP,\n"
      "MatchBERT, SMASH, HAN). With --valid-pairs, the validation loss is logged every\n"
      "--validate-every steps and the best model kept in <run>/best (stop early with\n"
      "--patience). Resumes from <run>/latest like pretrain.\n"
      "  docmatch finetune --corpus corpora/manpages --init checkpoints/smith-tiny-manpages/latest \\\n"
      "      --train-pairs corpora/manpages/pairs.train.jsonl --valid-pairs corpora/manpages/pairs.valid.jsonl");
  auto o = std::make_shared<train::FinetuneOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  auto no_progress = std::make_shared<bool>(false);
  auto fresh = std::make_shared<bool>(false);
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--train-pairs", o->train_pairs, "labelled training pairs (JSONL)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--valid-pairs", o->valid_pairs, "labelled validation pairs (JSONL)")->check(CLI::ExistingFile);
  sub->add_option("--init", o->init, "model folder to start from (a pre-training checkpoint)")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--model", o->model, "model YAML when training from scratch")->capture_default_str();
  sub->add_option("--run", o->run, "checkpoint folder of this run")->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "pairs per rank per micro-step")->capture_default_str();
  sub->add_option("--accumulation", o->accumulation, "micro-steps per optimizer step")->capture_default_str();
  sub->add_option("--steps", o->steps, "optimizer steps in all")->capture_default_str();
  AddOptimizerFlags(sub, &o->optimizer);
  sub->add_option("--seed", o->seed, "weights and pair order")->capture_default_str();
  sub->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints")->capture_default_str();
  sub->add_option("--keep-last", o->keep_last, "checkpoints kept")->capture_default_str();
  sub->add_option("--log-every", o->log_every, "steps between metric lines")->capture_default_str();
  sub->add_option("--validate-every", o->validate_every, "steps between validations (0 = never)")
      ->capture_default_str();
  sub->add_option("--patience", o->patience, "stop after this many validations without improvement (0 = never)")
      ->capture_default_str();
  sub->add_option("--on-nonfinite", o->on_nonfinite, "a NaN/Inf loss: stop (naming the documents) or skip the step")
      ->capture_default_str()
      ->check(CLI::IsMember({"stop", "skip"}));
  AddDistributedFlags(sub, flags.get());
  sub->add_flag("--fresh", *fresh, "ignore existing checkpoints in --run (default: resume from latest)");
  sub->add_flag("--no-progress", *no_progress, "no progress bar");
  return {sub, [o, flags, no_progress, fresh] {
            o->progress = !*no_progress;
            o->resume = !*fresh;
            return RunDistributed(*flags, [&](dist::Communicator& communicator, const torch::Device& device) {
              const train::FinetuneResult result = train::RunFinetuning(*o, communicator, device);
              if (communicator.rank() == 0) {
                std::cout << "[finetune] done at step " << result.step << ", " << o->run;
                if (result.best_step >= 0) {
                  std::cout << "; best validation loss " << result.best_valid_loss << " at step " << result.best_step
                            << " -> " << o->run << "/best";
                }
                std::cout << std::endl;
              }
              return 0;
            });
          }};
}

}  // namespace docmatch::cli
