// `docmatch pretrain`: SMITH-WP, SMITH-WP+SP or DocSplit pre-training of the
// hierarchical encoder, or SDR's sentence encoder, on 1 or N ranks.
//
// Each rank streams its share of the corpus (ShardStream), builds batches on
// a background thread (BatchLoader), computes the data-parallel objective
// (objectives.h), averages gradients (GradientSynchronizer), clips, steps
// AdamW on the warm-up/decay schedule, logs on rank 0 (progress bar, JSON
// lines, TensorBoard) and checkpoints every `checkpoint_every` steps
// (train/training_run.h). Each checkpoint is also a model folder: `finetune
// --init`, `embed` and `export` read the encoder from it. With `resume`, a run
// continues from <run>/latest; on CPU the result is the same, bit for bit, as
// a run that never stopped.
//
// With `valid_corpus` (prepared with the same tokenizer) the objective is
// also computed every `validate_every` steps (default: at every checkpoint)
// on its first `valid_documents` documents, dropout off and the masks of
// epoch 0, so every validation sees the same batches: "valid/loss" in the
// metrics, the best model in <run>/best/, early stopping with `patience`.
#pragma once

#include <string>

#include "dist/process_group.h"
#include "train/optimizer.h"

namespace docmatch::train {

// Which objective trains which kind: the table of train/pretraining_objectives.h
// (wp and docsplit on smith and match_bert, wp+sp on smith, sdr on sdr).
//
// With `init` (a model folder: an import-hf output, a pretrain or finetune
// checkpoint, an export) the model and its weights come from the folder and
// the corpus must have been prepared with its tokenizer. A pre-training
// checkpoint brings its heads too; any other folder brings the encoder, and
// the heads (word LM, block prediction) start fresh. The optimizer always
// starts fresh; the run's own checkpoints resume as without `init`.
//
// With `grad_cache` > 0, DocSplit embeds each rank's batch that many
// documents at a time (train/grad_cache.h): the loss and gradients of the
// whole global batch with one chunk's activations in memory, so
// --batch-size can grow far beyond what fits.
struct PretrainOptions : LoopOptions {
  PretrainOptions() { run = "checkpoints/smith-pretrain"; }
  static constexpr const char* kDefaultModel = "configs/models/smith-tiny.yaml";
  std::string corpus;                 // prepared corpus folder
  std::string model;                  // model YAML; "" = kDefaultModel, or the model of `init`
  std::string init;                   // model folder to continue from; "" = random weights
  std::string objective = "wp+sp";    // a name of PretrainObjectives(): wp | wp+sp | docsplit | sdr
  double temperature = 0.05;          // DocSplit's InfoNCE temperature
  double lm_weight = 0.1;             // DocSplit: weight of the word LM term (0 = none, views unmasked)
  bool detach_block_targets = false;  // wp+sp: stop-gradient on the block loss's candidates (objectives.h)
  int64_t grad_cache = 0;             // DocSplit: gradient caching, this many documents a chunk (0 = off)
  // wp, wp+sp on SMITH: each batch padded to its step bucket
  // (data/batches/step_buckets.h), so that the steps take a few shapes (what
  // a captured step needs); the losses and gradients are the unpadded ones.
  bool step_buckets = false;
  // wp, wp+sp on SMITH, one CUDA rank: the micro-step's forward and backward
  // replayed from a CUDA graph per step bucket (train/captured_step.h);
  // implies step_buckets.
  bool cuda_graphs = false;
  std::string valid_corpus;           // prepared corpus for the validation loss; "" = none
  int64_t valid_documents = 256;      // its first documents that validation reads
  int loader_threads = 2;             // threads building batches (data::BatchLoader)
};

// Runs (or resumes) the pre-training.
// The group gives the device, the data plane and the control plane.
LoopResult RunPretraining(const PretrainOptions& options, dist::ProcessGroup& group);

}  // namespace docmatch::train
