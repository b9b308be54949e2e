// `docmatch finetune`: Siamese pair fine-tuning (SMITH §4.3, MatchBERT,
// SMASH / HAN) on labelled pairs, on 1 or N ranks.
//
// The model starts from a pre-training checkpoint's encoder (`init`: SMITH-WP,
// SMITH-WP+SP, DocSplit) or from scratch (`model`, a YAML: SMITH-NP,
// MatchBERT, SMASH). Each optimizer step takes the next `world x batch_size`
// pairs of an epoch's permutation (keyed by seed and epoch), rank r the r-th
// slice. Two losses:
//  - contrastive (the default): the related pairs alone, each source against
//    every rank's targets plus up to `hard_negatives` labelled negatives of
//    each source, each target against every rank's sources, symmetric InfoNCE
//    at `temperature` (objectives.h, Contrastive). It teaches an ordering,
//    which is what ranking and search need, and every step sees the global
//    batch's negatives instead of one.
//  - bce: sigmoid cross-entropy of the pair logit (model::DocumentModel) on
//    every labelled pair, the papers' Siamese recipe; it teaches a threshold.
// With `grad_cache` > 0 the contrastive batch is embedded that many pairs at
// a time (train/grad_cache.h): the whole global batch's loss and gradients
// with one chunk's activations in memory.
// Every `validate_every` steps the validation pairs give a loss and accuracy
// (contrastive: the objective over all validation pairs at once, in every
// process, and the share whose partner ranks first); the best model so far is kept in <run>/best/ (a
// model folder), and with `patience` the run stops after that many
// validations without improvement. Checkpoints and resume as in pretraining
// (train/training_run.h).
#pragma once

#include <string>

#include "dist/process_group.h"
#include "train/optimizer.h"

namespace docmatch::train {

struct FinetuneOptions : LoopOptions {
  FinetuneOptions() {
    run = "checkpoints/smith-finetune";
    validate_every = 100;
  }
  std::string corpus;                                    // prepared corpus folder
  std::string train_pairs, valid_pairs;                  // JSONL pairs (data/batches/pairs.h); valid may be empty
  std::string init;                                      // model folder to start from; empty = from scratch
  std::string model = "configs/models/smith-tiny.yaml";  // model YAML, from scratch only
  std::string loss = "contrastive";  // a name of FinetuneLosses(): contrastive | multipositive | bce
  double temperature = 0.05;         // contrastive: cosine / temperature (scale 20)
  bool learn_temperature = false;    // contrastive: train log(1/temperature), from `temperature`
  double temperature_lr = 1e-2;      // its peak learning rate (the schedule of `optimizer`)
  int64_t hard_negatives = 1;        // contrastive: labelled negatives per source, at most
  int64_t mine_negatives = 0;  // contrastive: TF-IDF-nearest negatives mined per source (0 = none; mined_negatives.h)
  double mine_margin = 0.1;    // ... leaving out those above the source's best positive by more (< 0: keep them)
  int64_t refresh_negatives =
      0;                      // contrastive: re-mine them from the model's own vectors every N steps (ANCE; 0 = off)
  int64_t grad_cache = 0;     // contrastive: gradient caching, this many pairs a chunk (0 = off)
  bool drop_related = false;  // contrastive: in-batch candidates labelled related to the query are not negatives
  bool step_buckets = false;  // SMITH: each embedding pass padded to its step bucket (DocumentModel::step_buckets)
  bool cuda_graphs = false;   // SMITH contrastive, one GPU: steps replayed from CUDA graphs (train/captured_step.h)
};

LoopResult RunFinetuning(const FinetuneOptions& options, dist::ProcessGroup& group);

}  // namespace docmatch::train
