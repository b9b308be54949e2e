// The training objectives, each in one place, each a pure function of tensors
// so that tests can hold it against an independent float64 computation.
//
// Contrastive losses take the local vectors and the candidate vectors as
// separate arguments: on N ranks the candidates are the all-gathered pool and
// `positive` indexes into it; on one rank they are simply the local vectors.
// Each averages over its items, or with `sum` adds them up (the distributed
// objectives in train/ divide by the global item count themselves).
#pragma once

#include <torch/torch.h>

namespace docmatch::model {

// Masked word LM: cross-entropy of `logits` (M, V) against `labels` (M,),
// averaged over the M predicted tokens.
torch::Tensor MaskedLmLoss(const torch::Tensor& logits, const torch::Tensor& labels, bool sum = false);

// The same loss from the LM head's last states: cross-entropy of
// hidden (M, C) @ decoder (V, C)^T + bias (V,) against labels (M,), without
// keeping the (M, V) logits. Forward keeps only their log-softmax; backward
// turns it into the logits' gradient in place (softmax - one-hot) and never
// writes the dense one-hot gradient that cross_entropy's backward builds: on
// smith-tiny the vocabulary side was a quarter of the step (bench/NOTES.md).
// Under autocast the products run in the autocast type, the softmax in fp32.
// `valid` (M,) bool, if given, leaves the rows where it is false out of the
// loss and of its mean (their labels may be anything, -100 included).
torch::Tensor DecoderCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& decoder, const torch::Tensor& bias,
                                  const torch::Tensor& labels, bool sum = false, const torch::Tensor& valid = {});

// SMITH masked sentence-block prediction (§4.2.2): each prediction (M, C)
// scores every candidate (N, C) by dot product; softmax cross-entropy with the
// original block `positive` (M,) as the target, averaged over M. With
// `scores`, the logits (M, N) are written there, detached, for metrics on the
// same pass.
// `real` (N,) bool, if given, leaves the candidates where it is false out of
// every counted row's softmax; rows whose `positive` is data::kIgnoreLabel
// (-100) are left out of the loss and its mean (and keep every candidate).
torch::Tensor SentenceBlockLoss(const torch::Tensor& predictions, const torch::Tensor& candidates,
                                const torch::Tensor& positive, bool sum = false, torch::Tensor* scores = nullptr,
                                const torch::Tensor& real = {});

// Siamese pair loss (SMITH §4.3, MatchBERT): sigmoid cross-entropy of
// amplifier * cos(a, b) against `labels` (B,) in {0, 1}; a, b (B, C).
torch::Tensor SiameseCosineLoss(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& labels,
                                double amplifier, bool sum = false);

// DocSplit's symmetric InfoNCE (SimCLR's NT-Xent): every view (V, C) scores
// every candidate (N, C) by cosine / temperature; its own entry `self` (V,)
// is excluded, its partner view `positive` (V,) is the target. With both
// halves of every document among the views, both directions are counted.
torch::Tensor DocSplitLoss(const torch::Tensor& views, const torch::Tensor& candidates, const torch::Tensor& self,
                           const torch::Tensor& positive, double temperature, bool sum = false);

// The contrastive temperature tau (logits = cosine / tau): a fixed number,
// or learned as CLIP learns it (Radford et al. 2021): a parameter
// log_scale = log(1 / tau), the scale exp(log_scale) capped at 100 (tau at
// least 0.01), so that the model can sharpen or soften its own softmax.
class Temperature {
 public:
  Temperature(double fixed) : fixed_(fixed) {}  // NOLINT(google-explicit-constructor): a number is a fixed tau
  static Temperature Learned(torch::Tensor log_scale);
  static constexpr double kMaxScale = 100.0;

  // cosines / tau, differentiable in log_scale when learned.
  torch::Tensor Apply(const torch::Tensor& cosines) const;
  // tau now (the capped one when learned); when learned, a read of the
  // device's log-scale.
  double value() const;
  // tau for a log-scale already on the host, capped as Apply caps it.
  static double OfLogScale(double log_scale);
  bool learned() const { return log_scale_.defined(); }
  const torch::Tensor& log_scale() const { return log_scale_; }

 private:
  double fixed_ = 0.05;
  torch::Tensor log_scale_;  // 0-dim; defined when learned
};

// Contrastive pair loss (InfoNCE over a pool, as sentence-transformers'
// MultipleNegativesRankingLoss computes it): query i (Q, C) scores every
// candidate (N, C) by cosine / temperature, candidates where `excluded`
// (Q, N) is true are left out (other copies of the query's own document or of
// its positive), and softmax cross-entropy takes `positive` (Q,) as the target.
// With `scores`, the masked logits (Q, N) it computed are written there,
// detached (excluded entries -inf), for metrics on the same pass.
torch::Tensor ContrastivePairLoss(const torch::Tensor& queries, const torch::Tensor& candidates,
                                  const torch::Tensor& positive, const torch::Tensor& excluded,
                                  const Temperature& temperature, bool sum = false, torch::Tensor* scores = nullptr);

// Multi-positive InfoNCE over a pool: as ContrastivePairLoss, but each query
// has a set of positives, `positives` (Q, N), and its loss is minus the log
// of the softmax mass on them, -log(sum_p exp(l_p) / sum_c exp(l_c)) over
// the candidates not `excluded`. With one positive per query it is
// ContrastivePairLoss. `scores` as there.
torch::Tensor MultiPositivePairLoss(const torch::Tensor& queries, const torch::Tensor& candidates,
                                    const torch::Tensor& positives, const torch::Tensor& excluded,
                                    const Temperature& temperature, bool sum = false, torch::Tensor* scores = nullptr);

// SDR's cosine contrastive loss (Ginzburg et al. 2021, §3.2): anchor i (B, C)
// meets candidate pair[i] of (N, C); label 1 pulls the cosine to 1 (loss
// 1 - cos), label 0 pushes it below 1 - margin (loss max(0, cos - (1 -
// margin))); margin 1 is the paper's choice: negatives stop at cosine 0.
torch::Tensor SdrContrastiveLoss(const torch::Tensor& anchors, const torch::Tensor& candidates,
                                 const torch::Tensor& pair, const torch::Tensor& labels, double margin,
                                 bool sum = false);

// Per row of `scores` (Q, N), 1 / the rank of its best-scored positive
// (`positives`, a bool mask of the same shape): 1 + the candidates scored
// above it, or equal to it and not positive (ties count against it). A row
// without a positive gets 1 / (1 + its candidates above -inf); callers mask
// those out. (Q,) float64; excluded candidates are expected at -inf.
torch::Tensor ReciprocalRanks(const torch::Tensor& scores, const torch::Tensor& positives);

}  // namespace docmatch::model
