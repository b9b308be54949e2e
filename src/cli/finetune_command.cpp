// `docmatch finetune`: Siamese pair fine-tuning (train/finetune.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "train/finetune.h"
#include "train/finetuning_losses.h"

namespace docmatch::cli {

Command AddFinetuneCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "finetune",
      "Fine-tune a document matcher on labelled pairs ({\"source\", \"target\", \"label\"}\n"
      "JSONL, ids of the corpus). Start from a model folder with --init (or --model):\n"
      "a pre-training checkpoint (SMITH-WP, -WP+SP, DocSplit), an import or an export;\n"
      "or from scratch with --model-config, a model YAML (SMITH-NP, MatchBERT, SMASH,\n"
      "HAN; configs/models/). With --valid-pairs, the validation loss is logged every\n"
      "--validate-every steps and the best model kept in <run>/best (stop early with\n"
      "--patience). Resumes from <run>/latest like pretrain.\n\n"
      "--loss contrastive (the default) trains on the related pairs: each source against\n"
      "every rank's targets and up to --hard-negatives of its labelled negatives, each\n"
      "target against every rank's sources (symmetric InfoNCE, --temperature). It teaches\n"
      "an ordering, which ranking and search need, and each step sees the whole global\n"
      "batch as negatives. --loss multipositive: the same, but an in-batch document that\n"
      "a training pair labels related to the source is one more positive, not a negative.\n"
      "--loss bce is the papers' Siamese recipe (SMITH, SMASH):\n"
      "sigmoid cross-entropy of each labelled pair's logit; it teaches a threshold.\n"
      "  docmatch finetune --corpus corpora/manpages --init checkpoints/smith-tiny-manpages/latest \\\n"
      "      --train-pairs data/manpages/pairs.train.jsonl --valid-pairs data/manpages/pairs.valid.jsonl");
  auto o = std::make_shared<train::FinetuneOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--train-pairs", o->train_pairs, "labelled training pairs (JSONL)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--valid-pairs", o->valid_pairs, "labelled validation pairs (JSONL)")->check(CLI::ExistingFile);
  sub->add_option("--init,--model", o->init,
                  "model folder to start from (a pre-training checkpoint, an import or an export)")
      ->check(ModelFolder());
  sub->add_option("--model-config", o->model, "model YAML when training from scratch (configs/models/)")
      ->check(ModelConfigFile());
  sub->add_option("--loss", o->loss, train::DescribeFinetuneLosses())
      ->check(CLI::IsMember(train::FinetuneLossNames()))
      ->capture_default_str();
  sub->add_option("--temperature", o->temperature, "contrastive: softmax temperature of the cosines")
      ->check(TemperatureRange())
      ->capture_default_str();
  sub->add_flag("--learn-temperature", o->learn_temperature,
                "contrastive: learn the temperature (as CLIP does: log(1/temperature) is a parameter, "
                "starting from --temperature, capped at 1/100), logged as 'temperature'");
  sub->add_option("--temperature-lr", o->temperature_lr,
                  "contrastive, with --learn-temperature: its peak learning rate, on --lr's schedule (a "
                  "fine-tuning --lr such as 5e-5 would barely move it)")
      ->check(Positive())
      ->capture_default_str();
  sub->add_option("--hard-negatives", o->hard_negatives,
                  "contrastive: labelled negatives of each source added to its candidates, at most")
      ->check(NonNegative())
      ->capture_default_str();
  CLI::Option* mine =
      sub->add_option("--mine-negatives", o->mine_negatives,
                      "contrastive: also mine this many hard negatives per source from the corpus's TF-IDF "
                      "neighbours (never the source, nor a document labelled related to it); --hard-negatives of "
                      "them and the labelled ones go with each pair")
          ->check(NonNegative())
          ->capture_default_str();
  sub->add_option("--mine-margin", o->mine_margin,
                  "with --mine-negatives: leave out a neighbour whose TF-IDF cosine exceeds the source's best "
                  "positive's by more than this (likely an unlabelled positive); negative: keep all")
      ->needs(mine)
      ->check(Finite())
      ->capture_default_str();
  sub->add_option("--refresh-negatives", o->refresh_negatives,
                  "with --mine-negatives: every N steps, mine them again from the model's own vectors of the "
                  "whole corpus (ANCE), with the same filters; the first come from TF-IDF (0 = never)")
      ->check(NonNegative())
      ->capture_default_str();
  sub->add_flag("--drop-related", o->drop_related,
                "contrastive: leave out of a query's negatives every in-batch candidate that a training pair "
                "labels related to it (either direction); without it only copies of the pair's own documents "
                "and the other pairs of the same source are left out. Matters where related pairs crowd together "
                "(a link graph's hubs): their count in the batch grows with it (scripts/in-batch-related.py)");
  sub->add_flag("--step-buckets", o->step_buckets,
                "SMITH: pad each embedding pass to its step bucket (a few fixed shapes, what a CUDA-graph step "
                "needs); with dropout off the vectors, losses and gradients are the unpadded pass's (dropout draws "
                "over the padded grid), the padding costs time");
  sub->add_flag("--cuda-graphs,!--no-cuda-graphs", o->cuda_graphs,
                "SMITH, --loss contrastive, one GPU: each step bucket's embedding pass, loss and backward, and "
                "the update, captured once as CUDA graphs and replayed; implies --step-buckets. One rank only; "
                "not with --drop-related, --grad-cache or --freeze-sentence-steps. Experimental: tested on CPU "
                "for its inputs, not yet measured on a GPU (bench/NOTES.md)");
  AddSentenceLevelFlags(sub, o.get());
  AddGradCacheFlag(sub, &o->grad_cache, "contrastive", "pairs");
  AddLoopFlags(sub, o.get(), "pairs");
  AddDistributedFlags(sub, flags.get());
  return {sub, [o, flags] {
            RefuseRunOverInputs("finetune", o->run, {o->corpus, o->init, o->train_pairs, o->valid_pairs}, !o->resume);
            return RunDistributed(*flags, [&](dist::ProcessGroup& group) {
              return WithMemoryAdvice("finetune", o->batch_size,
                                      "--grad-cache N (contrastive: the same batch, one chunk in memory), or a "
                                      "smaller --batch-size with --accumulation N",
                                      [&] {
                                        const train::LoopResult result = train::RunFinetuning(*o, group);
                                        return ReportLoop("finetune", result, o->run, group.rank());
                                      });
            });
          }};
}

}  // namespace docmatch::cli
