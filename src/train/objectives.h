// The training objectives as data-parallel runs compute them: each rank's
// loss over its own items, scored against candidates gathered from every rank
// (dist/all_gather.h) where the method has in-batch negatives, and scaled so
// that the GradientSynchronizer's average over ranks gives exactly the
// gradient of the global-batch mean (DESIGN.md: N ranks x batch b == 1 rank
// x batch N*b, dropout off, up to float summation order).
//
// Scaling: a loss that averages over items (tokens, blocks, pairs, views) is
// computed here as   sum over local items * world_size / global item count,
// with the global count from one small all-reduce. `value` is the global mean
// itself, identical on every rank, for logs.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "data/batches/step_buckets.h"
#include "dist/process_group.h"
#include "model/losses.h"
#include "model/match_bert.h"
#include "model/sdr.h"
#include "model/smith.h"

namespace docmatch::train {

struct Objective {
  torch::Tensor loss;                   // local and scaled: what Backward() back-propagates
  double value = 0;                     // the global-batch mean of the objective, same on every rank
  std::map<std::string, double> parts;  // e.g. {"lm": ..., "block": ...}, global means
  // Figures too costly for every step, measured only for the steps that are
  // logged (the trainer calls it then; no collectives inside); may be empty.
  std::function<std::map<std::string, double>()> diagnostics;
  // Set by gradient caching (grad_cache.h), whose `loss` holds no graph: it
  // re-runs the chunks and back-propagates `scale` times their cached
  // gradients, calling `prepare(last)` before each chunk's pass.
  std::function<void(double scale, const std::function<void(bool last)>& prepare)> backward;
};

// A step's objective over its --accumulation micro-steps, as the loops log
// it: the mean of their values and parts, the last one's diagnostics, and
// whether every value was finite.
struct StepObjective {
  double value = 0;
  std::map<std::string, double> parts;
  std::function<std::map<std::string, double>()> diagnostics;
  bool finite = true;
  // One of `micro_steps` micro-steps, `usable` as CheckFinite judged it.
  void Add(const Objective& micro, int64_t micro_steps, bool usable) {
    finite = finite && usable;
    value += micro.value / static_cast<double>(micro_steps);
    for (const auto& [name, part] : micro.parts) parts[name] += part / static_cast<double>(micro_steps);
    diagnostics = micro.diagnostics;
  }
};

// Back-propagates `scale` x the objective into the parameters' gradients:
// prepare(true), then loss.backward(); or, for a cached objective, one pass
// per chunk with prepare(last chunk) before each. `prepare` is where the
// GradientSynchronizer's Prepare(sync) goes: only the last pass of a step may
// sync, the earlier ones accumulate like micro-steps.
void Backward(const Objective& objective, double scale, const std::function<void(bool last)>& prepare);

// How spread out a pool of block vectors (N, C) is: the mean cosine between
// distinct rows, and the effective rank exp(-sum p log p) of the singular
// values normalised to sum 1 (1: every row on one line; C: evenly spread).
struct BlockPoolSpread {
  double mean_cosine = 0;
  double effective_rank = 0;
};
BlockPoolSpread MeasureBlockPool(const torch::Tensor& vectors);

// SMITH-WP (sentence_blocks false) or WP+SP: word LM + masked sentence-block
// prediction against every rank's masked blocks. parts: lm, block and
// block_top1 (share of predictions whose own block scores highest);
// diagnostics: block_cosine and block_rank (MeasureBlockPool of the targets).
// detach_block_targets: the block loss does not train the candidate block
// vectors it scores against (stop-gradient; the paper and the official code
// train them); they are still trained as the document transformer's inputs.
// A batch padded to its step bucket (model::ToTensors with a shape) needs
// `real`, its real counts (data::CountStep of the batch) as host values for
// the global means; its fillers are then in no loss, mean, candidate pool or
// diagnostic, so the objective and its gradients are the unpadded batch's.
Objective SmithPretraining(model::SmithPretraining& model, const model::BlockTensors& batch, bool sentence_blocks,
                           dist::ProcessGroup& group, bool detach_block_targets = false,
                           const data::StepCounts* real = nullptr);

// SmithPretraining's device half: the forward and this rank's local sums,
// with no count, no host read and no host-made tensor (what a captured step
// records, train/captured_step.h). The global counts, the scaling and the
// means are the host's, around it.
struct SmithSums {
  torch::Tensor lm;           // the word LM's summed loss over this rank's predicted rows (fillers out)
  torch::Tensor block;        // the block loss summed over its masked blocks; undefined without sentence blocks
  torch::Tensor top1;         // float64: how many of them score their own block highest
  torch::Tensor targets;      // the candidate pool, detached (the diagnostics read it)
  torch::Tensor pooled_real;  // bool: which candidates are real blocks; undefined without fillers
  int64_t lm_rows = 0, block_rows = 0;  // the layout's predicted rows and masked blocks, fillers included
};
SmithSums SmithPretrainingSums(model::SmithPretraining& model, const model::BlockTensors& batch, bool sentence_blocks,
                               dist::ProcessGroup& group, bool detach_block_targets);
// block_cosine and block_rank of the sums' real candidates (MeasureBlockPool),
// read when called.
std::function<std::map<std::string, double>()> BlockPoolDiagnostics(const SmithSums& sums);

// DocSplit: `views` holds this rank's first halves then its second halves;
// InfoNCE against every rank's views, plus lm_weight * word LM (lm_weight 0:
// no LM term, part "lm" absent). Views padded to their step bucket need
// `real`, their real counts (data::CountStep), as SmithPretraining does.
Objective DocSplit(model::SmithPretraining& model, const model::BlockTensors& views, dist::ProcessGroup& group,
                   double temperature = 0.05, double lm_weight = 0.1, const data::StepCounts* real = nullptr);
// The same on a flat encoder (MatchBERT), views from data::BuildFlatDocSplitBatch
// (with masks for an LM term).
Objective DocSplit(model::FlatPretraining& model, const data::FlatBatch& views, dist::ProcessGroup& group,
                   double temperature = 0.05, double lm_weight = 0.1);

// DocSplit over views built in chunks of a rank's documents (one
// BuildDocSplitBatch / BuildFlatDocSplitBatch per chunk): with one chunk the
// objective above; with more, gradient caching (grad_cache.h) gives the same
// loss and gradients over the whole batch with one chunk's activations alive.
Objective DocSplit(model::SmithPretraining& model, const std::vector<data::BlockBatch>& chunks,
                   dist::ProcessGroup& group, double temperature, double lm_weight);
Objective DocSplit(model::FlatPretraining& model, const std::vector<data::FlatBatch>& chunks, dist::ProcessGroup& group,
                   double temperature, double lm_weight);

// The masked word LM alone on a flat encoder (pretrain --objective wp on
// match_bert); part "lm".
Objective WordLm(model::FlatPretraining& model, const data::FlatBatch& batch, dist::ProcessGroup& group);

// SDR: word LM + cosine contrastive, pairs indexing the gathered partners
// (build the batch with its global offset, data/batches/sdr_batch.h).
Objective Sdr(model::SentenceEncoder& model, const model::SdrTensors& batch, dist::ProcessGroup& group);

// Fine-tuning (SMITH, MatchBERT, SMASH): sigmoid cross-entropy of this
// rank's pair logits (B,) (model::DocumentModel::PairLogits) against labels
// in {0, 1}; parts: "bce" and "accuracy" (logit >= 0 taken as related).
Objective Siamese(const torch::Tensor& logits, const torch::Tensor& labels, dist::ProcessGroup& group);

// Contrastive fine-tuning on related pairs (finetune --loss contrastive), the
// vectors as DocumentModel::Embed gives them and their documents' corpus
// indices:
struct ContrastivePairs {
  torch::Tensor sources, targets;        // (b, C) this rank's related pairs
  torch::Tensor source_ids, target_ids;  // (b,) int64 corpus indices
  torch::Tensor negatives;               // (h, C) labelled negatives of this rank's sources (hard negatives)
  torch::Tensor negative_ids;            // (h,) int64
};
// The labelled relation of the training pairs, both directions, over corpus
// indices (finetune --drop-related, and the false-negative filter of mined
// negatives): a candidate related to the query is another positive, not a
// negative.
class RelatedPairs {
 public:
  RelatedPairs() = default;
  // Every (source, target) with label 1, and its reverse.
  template <typename Pairs>
  explicit RelatedPairs(const Pairs& pairs) {
    for (const auto& p : pairs) {
      if (p.label != 1) continue;
      related_[p.source].insert(p.target);
      related_[p.target].insert(p.source);
    }
  }
  bool Related(int64_t a, int64_t b) const;
  // Every document related to `id` (empty when none).
  const std::unordered_set<int64_t>& Of(int64_t id) const;
  // (R, C) bool host tensor: whether rows[r] and columns[c] are related
  // (int64 ids, on the host or the device).
  torch::Tensor Mask(const torch::Tensor& rows, const torch::Tensor& columns) const;

 private:
  std::unordered_map<int64_t, std::unordered_set<int64_t>> related_;
};

// Symmetric InfoNCE over the global batch (ContrastivePairLoss, model/losses.h):
// each source scores every rank's targets and hard negatives, each target every
// rank's sources, its own partner the positive. A candidate is left out when it
// is the query's own document or its positive again (the same corpus index,
// on any rank), or when its pair shares the query's document (then it is
// another known positive); with `related`, also when the relation calls it
// related to the query (its own pair's positive excepted). Mean over 2 x global pairs; parts "infonce" and
// "top1" (share of queries whose positive scores highest). A learned
// temperature gets its gradient like any parameter (each rank's share; the
// GradientSynchronizer averages them) and adds part "temperature".
Objective Contrastive(const ContrastivePairs& pairs, const model::Temperature& temperature, dist::ProcessGroup& group,
                      const RelatedPairs* related = nullptr);
// Contrastive's device half for pairs all in this process, without a
// relation (a captured fine-tuning step's body, train/captured_step.h): the
// summed loss, the top-1 count and the summed reciprocal ranks over both
// directions' 2b queries, 0-dim tensors; the ids must be on the vectors'
// device; nothing is read back to the host.
struct ContrastiveTotals {
  torch::Tensor loss, top1, reciprocal_ranks;
};
ContrastiveTotals ContrastiveSumsHere(const ContrastivePairs& pairs, const model::Temperature& temperature);
// What Contrastive reports, from its means over the queries: value and parts
// "infonce", "top1", "mrr", and "temperature" from a learned one's log-scale.
Objective ContrastiveReport(double infonce, double top1, double mrr, std::optional<double> log_scale);

// The same objective over pairs that are all in this process (validation):
// every pair is a query, on no group.
Objective ContrastiveInOneProcess(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                  const RelatedPairs* related = nullptr);

// Multi-positive InfoNCE (finetune --loss multipositive; SupCon's L_in form):
// as Contrastive, but an in-batch candidate that `related` (the training
// pairs) labels related to the query is one more positive of it, not a
// negative: the query's loss is minus the log of the softmax mass on its own
// partner and those (model::MultiPositivePairLoss). Other copies of the
// query's document or of its partner stay left out. Where no other related
// candidate is in the batch it is Contrastive. A related document that is
// among the candidates twice (two pairs' targets, or a target and a hard
// negative) counts twice, as a repeated negative does in Contrastive.
// Parts "infonce" and "top1"
// (share of queries whose best-scored candidate is one of their positives).
Objective MultiPositiveContrastive(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                   dist::ProcessGroup& group, const RelatedPairs& related);
// The same over pairs that are all in this process (validation).
Objective MultiPositiveInOneProcess(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                    const RelatedPairs& related);

// This rank's summed pair BCE and count of correct pairs (logit >= 0 taken as
// related), the local part of Siamese; validation adds them up over batches.
std::pair<torch::Tensor, torch::Tensor> PairSums(const torch::Tensor& logits, const torch::Tensor& labels);

}  // namespace docmatch::train
