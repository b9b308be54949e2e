// `docmatch pretrain`: SMITH-WP / SMITH-WP+SP / DocSplit / SDR pre-training
// (train/trainer.h), one process or many under mpirun.
#include <iostream>

#include "cli/commands.h"
#include "cli/training_flags.h"
#include "train/trainer.h"

namespace docmatch::cli {

Command AddPretrainCommand(CLI::App* app) {
  CLI::App* sub =
      app->add_subcommand("pretrain",
                          "Pre-train on a prepared corpus: SMITH's masked word LM (wp) plus masked\n"
                          "sentence-block prediction (wp+sp), DocSplit's contrastive halves (docsplit)\n"
                          "or SDR's sentence objective (sdr, with an SDR model). Run it as is, or under\n"
                          "mpirun for data parallelism (each rank reads its share; gradients are\n"
                          "averaged). Checkpoints go to --run/step-<N>/ with 'latest'; running the same\n"
                          "command again resumes. A checkpoint is a model folder for finetune --init.\n"
                          "With --valid-corpus (prepared with this corpus's tokenizer.model) the\n"
                          "objective on held-out documents is logged every --validate-every steps as\n"
                          "valid/loss and the best model kept in --run/best (stop early: --patience).\n"
                          "  docmatch pretrain --corpus corpora/manpages --model configs/models/smith-tiny.yaml\n"
                          "  mpirun -np 2 docmatch pretrain --config configs/pretrain-smith-tiny.yaml");
  auto o = std::make_shared<train::PretrainOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--model", o->model, "model YAML (configs/models/, kind smith, or sdr for --objective sdr)")
      ->capture_default_str();
  sub->add_option("--objective", o->objective, "wp (word LM), wp+sp (plus sentence blocks), docsplit or sdr")
      ->capture_default_str()
      ->check(CLI::IsMember({"wp", "wp+sp", "docsplit", "sdr"}));
  sub->add_option("--valid-corpus", o->valid_corpus,
                  "prepared corpus for the validation loss (prepare --tokenizer <corpus>/tokenizer.model)")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--loader-threads", o->loader_threads,
                  "threads per rank building batches from the stream (the batches are the same for any number)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  sub->add_option("--valid-documents", o->valid_documents, "documents of --valid-corpus each validation reads")
      ->capture_default_str();
  AddLoopFlags(sub, o.get(), "documents");
  AddDistributedFlags(sub, flags.get());
  return {sub, [o, flags] {
            return RunDistributed(*flags, [&](dist::Communicator& communicator, const torch::Device& device) {
              const train::LoopResult result = train::RunPretraining(*o, communicator, device);
              return ReportLoop("train", result, o->run, communicator.rank());
            });
          }};
}

}  // namespace docmatch::cli
