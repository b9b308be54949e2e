// `docmatch pretrain`: SMITH-WP / SMITH-WP+SP / DocSplit / SDR pre-training
// (train/trainer.h), one process or many under mpirun.
#include <iostream>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "train/pretraining_objectives.h"
#include "train/trainer.h"

namespace docmatch::cli {

Command AddPretrainCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "pretrain",
      "Pre-train on a prepared corpus: SMITH's masked word LM (wp) plus masked\n"
      "sentence-block prediction (wp+sp), DocSplit's contrastive halves (docsplit)\n"
      "or SDR's sentence objective (sdr, with an SDR model). Run it as is, or under\n"
      "mpirun for data parallelism (each rank reads its share; gradients are\n"
      "averaged). Checkpoints go to --run/step-<N>/ with 'latest'; running the same\n"
      "command again resumes. A checkpoint is a model folder for finetune --init.\n"
      "With --valid-corpus (prepared with this corpus's tokenizer) the\n"
      "objective on held-out documents is logged every --validate-every steps as\n"
      "valid/loss and the best model kept in --run/best (stop early: --patience).\n"
      "--init continues from any model folder instead of random weights (an import-hf\n"
      "output, a checkpoint, an export): DocSplit on your own corpus, no labels needed,\n"
      "from a pretrained encoder. Prepare the corpus with that folder's tokenizer.\n"
      "SMITH from an import (import-hf --kind smith) can continue its document layers\n"
      "alone: --freeze-sentence-steps = --steps keeps the sentence encoder as imported.\n"
      "  docmatch pretrain --corpus corpora/manpages --model-config configs/models/smith-tiny.yaml\n"
      "  docmatch pretrain --corpus corpora/wiki-minilm --init checkpoints/minilm-import \\\n"
      "      --objective docsplit --lm-weight 0 --lr 2e-5 --batch-size 256 --grad-cache 16\n"
      "  docmatch pretrain --corpus corpora/manpages-minilm --init models/smith16 --objective docsplit \\\n"
      "      --lm-weight 0 --steps 30 --freeze-sentence-steps 30\n"
      "  mpirun -np 2 docmatch pretrain --config configs/pretrain-smith-tiny.yaml");
  auto o = std::make_shared<train::PretrainOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--model-config", o->model,
                  std::string("model YAML for random weights (configs/models/; default ") +
                      train::PretrainOptions::kDefaultModel + "); not with --init")
      ->check(ModelConfigFile());
  sub->add_option("--init,--model", o->init,
                  "model folder to continue from (import-hf output, checkpoint step-<N>/ or latest, export); "
                  "the corpus must be prepared with its tokenizer")
      ->check(ModelFolder());
  sub->add_option("--objective", o->objective, train::DescribePretrainObjectives())
      ->capture_default_str()
      ->check(CLI::IsMember(train::PretrainObjectiveNames()));
  sub->add_option("--temperature", o->temperature, "DocSplit's InfoNCE temperature")
      ->capture_default_str()
      ->check(TemperatureRange());
  sub->add_option("--lm-weight", o->lm_weight,
                  "DocSplit: weight of the masked word LM term; 0 = none, and the halves are read unmasked "
                  "(a pretrained encoder has no LM head to keep)")
      ->capture_default_str()
      ->check(NonNegative());
  sub->add_flag("--detach-block-targets", o->detach_block_targets,
                "wp+sp: the masked-block loss does not train the candidate block vectors it scores against "
                "(stop-gradient; the paper and the official code train them). For continuing from an imported "
                "encoder: there the paper's form flattens the block vectors and stays at chance, this one learns "
                "(docs/RESULTS.md, SMITH)");
  sub->add_flag("--step-buckets", o->step_buckets,
                "SMITH wp, wp+sp, docsplit: pad each batch to its step bucket (a few fixed shapes, what a "
                "CUDA-graph step needs); the losses and gradients are the unpadded batch's, the padding costs time");
  sub->add_flag("--cuda-graphs,!--no-cuda-graphs", o->cuda_graphs,
                "SMITH wp, wp+sp on one GPU: each step bucket's forward and backward, and the update "
                "(clipping, AdamW), captured once as CUDA graphs and replayed (a launch each instead of ~1,000 "
                "kernels a step); implies --step-buckets. "
                "One rank only; not with --freeze-sentence-steps. Experimental: tested on CPU for its inputs, "
                "not yet measured on a GPU (bench/NOTES.md)");
  AddSentenceLevelFlags(sub, o.get());
  AddGradCacheFlag(sub, &o->grad_cache, "DocSplit", "documents");
  sub->add_option("--valid-corpus", o->valid_corpus,
                  "prepared corpus for the validation loss (prepare --tokenizer <corpus>)")
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
            RefuseRunOverInputs("train", o->run, {o->corpus, o->init, o->valid_corpus}, !o->resume);
            return RunDistributed(*flags, [&](dist::ProcessGroup& group) {
              return WithMemoryAdvice("pretrain", o->batch_size,
                                      "a smaller --batch-size with --accumulation N to keep the batch per step "
                                      "(DocSplit: --grad-cache N keeps the negatives too), or a smaller model",
                                      [&] {
                                        const train::LoopResult result = train::RunPretraining(*o, group);
                                        return ReportLoop("train", result, o->run, group.rank());
                                      });
            });
          }};
}

}  // namespace docmatch::cli
