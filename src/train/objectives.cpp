// Each objective in its data-parallel form: local items against gathered pools,
// scaled once (Totals) so that ranks x batch equals one big batch (objectives.h).
#include "train/objectives.h"

#include <memory>
#include <numeric>

#include "console/error.h"
#include "dist/all_gather.h"
#include "model/host_to_device.h"
#include "model/losses.h"
#include "train/grad_cache.h"

namespace docmatch::train {
namespace {

// Host ids onto `device` (a no-op where they are): pinned and asynchronous
// to a GPU, so the copy does not wait for the device's queue.
torch::Tensor ToDevice(const torch::Tensor& ids, const torch::Device& device) {
  if (ids.device() == device) return ids;
  DOCMATCH_CHECK(ids.is_cpu(), "train", "ids on ", ids.device(), " for ", device, ": ids are host values");
  return model::HostToDevice(ids, device, ids.scalar_type());
}

// Global sums of a few local (sum, count) pairs. The counts are host values
// (control plane, no device sync: Scaled needs them); the sums stay on the
// device, travel as one float64 tensor on the data plane and reach the host
// in one copy, the step's one named host sync (the value logs and the
// non-finite check read).
class Totals {
 public:
  explicit Totals(dist::ProcessGroup& group) : group_(group) {}
  // Registers a local sum (detached for the value) and item count; returns its slot.
  int Add(const torch::Tensor& local_sum, int64_t local_count) {
    local_sums_.push_back(local_sum.detach().to(torch::kFloat64).reshape({}));
    counts_.push_back(static_cast<double>(local_count));
    return static_cast<int>(counts_.size() - 1);
  }
  void Reduce() {
    group_.control().Sum(counts_);
    torch::Tensor sums = torch::stack(local_sums_).to(group_.device());
    group_.data().AllReduce(sums);
    sums = sums.to(torch::kCPU);  // host sync: the values are needed on the host
    sums_.assign(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel());
  }
  double sum(int slot) const { return sums_[slot]; }
  double count(int slot) const { return counts_[slot]; }
  double mean(int slot) const { return count(slot) > 0 ? sum(slot) / count(slot) : 0.0; }
  // The local sum scaled so that averaging gradients over ranks gives the global mean's.
  torch::Tensor Scaled(const torch::Tensor& local_sum, int slot) const {
    return count(slot) > 0 ? local_sum * (group_.size() / count(slot)) : local_sum * 0.0;
  }

 private:
  dist::ProcessGroup& group_;
  std::vector<torch::Tensor> local_sums_;
  std::vector<double> counts_, sums_;
};

// Where a relation is given, what a candidate it labels related to the query
// is to the contrastive objective (without one, a negative like any other).
enum class RelatedCandidates {
  kLeftOut,   // --drop-related
  kPositive,  // multi-positive InfoNCE
};

// Both directions of the contrastive objective for the local pairs, whose
// global positions are `mine` (b,), against the pools of every pair (B, C) and
// every hard negative (H, C). Returns the summed loss, the count of queries
// whose best-scored candidate is a positive, and the sum of each query's
// reciprocal rank of its best-scored positive among its candidates (ties
// against it); 0-dim tensors: no host sync. The ids (host tensors, or already
// on the device) meet the vectors' device here.
ContrastiveTotals ContrastiveSums(const ContrastivePairs& local_pairs, const torch::Tensor& mine,
                                  const ContrastivePairs& pool_pairs, const model::Temperature& temperature,
                                  const RelatedPairs* related, RelatedCandidates rule) {
  const torch::Device device = local_pairs.sources.device();
  const auto on_device = [&](ContrastivePairs p) {
    for (torch::Tensor* ids : {&p.source_ids, &p.target_ids, &p.negative_ids}) *ids = ToDevice(*ids, device);
    return p;
  };
  const ContrastivePairs local = on_device(local_pairs), pool = on_device(pool_pairs);
  const int64_t B = pool.sources.size(0);
  const auto column = [](const torch::Tensor& ids) { return ids.unsqueeze(0); };                             // (1, B)
  const torch::Tensor my_source = local.source_ids.unsqueeze(1), my_target = local.target_ids.unsqueeze(1);  // (b, 1)
  const torch::Tensor own_pair = torch::arange(B, mine.options()).unsqueeze(0) == mine.unsqueeze(1);         // (b, B)
  // What the relation labels related, from the host ids (the own pair's positive is related too).
  const auto related_mask = [&](const torch::Tensor& rows, const torch::Tensor& columns) {
    return ToDevice(related->Mask(rows, columns), device);
  };
  const bool drop = related && rule == RelatedCandidates::kLeftOut;
  const auto or_related = [&](const torch::Tensor& out, const torch::Tensor& rows, const torch::Tensor& columns) {
    return drop ? out | related_mask(rows, columns) : out;
  };
  // source -> every target, then every hard negative
  const torch::Tensor targets_out =
      or_related((column(pool.target_ids) == my_target) | (column(pool.target_ids) == my_source) |
                     (column(pool.source_ids) == my_source),
                 local_pairs.source_ids, pool_pairs.target_ids) &
      ~own_pair;
  const torch::Tensor negatives_out =
      or_related((column(pool.negative_ids) == my_target) | (column(pool.negative_ids) == my_source),
                 local_pairs.source_ids, pool_pairs.negative_ids);  // (b, H)
  const torch::Tensor forward_candidates = torch::cat({pool.targets, pool.negatives});
  torch::Tensor forward_out = torch::cat({targets_out, negatives_out}, 1);
  // target -> every source
  torch::Tensor sources_out =
      or_related((column(pool.source_ids) == my_source) | (column(pool.source_ids) == my_target) |
                     (column(pool.target_ids) == my_target),
                 local_pairs.target_ids, pool_pairs.source_ids) &
      ~own_pair;
  torch::Tensor forward_scores, backward_scores;  // the masked logits of both directions
  if (rule != RelatedCandidates::kPositive || !related) {
    const torch::Tensor loss = model::ContrastivePairLoss(local.sources, forward_candidates, mine, forward_out,
                                                          temperature, /*sum=*/true, &forward_scores) +
                               model::ContrastivePairLoss(local.targets, pool.sources, mine, sources_out, temperature,
                                                          /*sum=*/true, &backward_scores);
    const auto top1 = [&](const torch::Tensor& scores) {
      return scores.argmax(1).eq(mine.to(device)).sum().to(torch::kFloat64);
    };
    const auto own = [&](const torch::Tensor& scores) {  // the one positive: the query's own pair
      return torch::zeros(scores.sizes(), scores.options().dtype(torch::kBool))
          .scatter_(1, mine.to(device).unsqueeze(1), true);
    };
    return {loss, top1(forward_scores) + top1(backward_scores),
            model::ReciprocalRanks(forward_scores, own(forward_scores)).sum() +
                model::ReciprocalRanks(backward_scores, own(backward_scores)).sum()};
  }
  // Multi-positive: the own partner and every related candidate that is not
  // another copy of the query's document or of its partner.
  const torch::Tensor forward_ids = torch::cat({pool.target_ids, pool.negative_ids});
  const torch::Tensor own_forward = torch::cat({own_pair, torch::zeros_like(negatives_out)}, 1);
  const torch::Tensor forward_copies = (column(forward_ids) == my_target) | (column(forward_ids) == my_source);
  const torch::Tensor forward_positives =
      own_forward |
      (related_mask(local_pairs.source_ids, torch::cat({pool_pairs.target_ids, pool_pairs.negative_ids})) &
       ~forward_copies);
  const torch::Tensor backward_copies = (column(pool.source_ids) == my_source) | (column(pool.source_ids) == my_target);
  const torch::Tensor backward_positives =
      own_pair | (related_mask(local_pairs.target_ids, pool_pairs.source_ids) & ~backward_copies);
  forward_out = forward_out & ~forward_positives;
  sources_out = sources_out & ~backward_positives;
  const torch::Tensor loss =
      model::MultiPositivePairLoss(local.sources, forward_candidates, forward_positives, forward_out, temperature,
                                   /*sum=*/true, &forward_scores) +
      model::MultiPositivePairLoss(local.targets, pool.sources, backward_positives, sources_out, temperature,
                                   /*sum=*/true, &backward_scores);
  const auto top1 = [](const torch::Tensor& scores, const torch::Tensor& positives) {
    return positives.gather(1, scores.argmax(1, /*keepdim=*/true)).sum().to(torch::kFloat64);
  };
  return {loss, top1(forward_scores, forward_positives) + top1(backward_scores, backward_positives),
          model::ReciprocalRanks(forward_scores, forward_positives).sum() +
              model::ReciprocalRanks(backward_scores, backward_positives).sum()};
}

// Every rank's ids (host values, on the control plane), in rank order, as a
// host tensor; `counts` (the rows of their vectors) must agree.
torch::Tensor GatherIds(const torch::Tensor& ids, const std::vector<int64_t>& counts, dist::ProcessGroup& group) {
  const torch::Tensor host = ids.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> gathered;
  const std::vector<int64_t> all = group.control().AllGatherUneven(
      std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel()), &gathered);
  DOCMATCH_CHECK(gathered == counts, "train", "the ranks' ids do not match their vectors' row counts");
  return torch::tensor(all, torch::kLong);
}

Objective ContrastiveObjective(const ContrastiveTotals& sums, int64_t queries, Totals& totals,
                               const model::Temperature& temperature) {
  const torch::Tensor& loss = sums.loss;
  const int loss_slot = totals.Add(loss, queries);
  const int top1_slot = totals.Add(sums.top1, queries);
  const int mrr_slot = totals.Add(sums.reciprocal_ranks, queries);
  // A learned temperature rides in the same copy as the sums: every rank adds
  // the same log-scale once, so their mean is it, and no item() of its own
  // waits for the device each step.
  const int scale_slot = temperature.learned() ? totals.Add(temperature.log_scale(), 1) : -1;
  totals.Reduce();
  Objective objective =
      ContrastiveReport(totals.mean(loss_slot), totals.mean(top1_slot), totals.mean(mrr_slot),
                        scale_slot >= 0 ? std::optional<double>(totals.mean(scale_slot)) : std::nullopt);
  objective.loss = totals.Scaled(loss, loss_slot);
  return objective;
}

}  // namespace

const std::unordered_set<int64_t>& RelatedPairs::Of(int64_t id) const {
  static const std::unordered_set<int64_t> none;
  const auto it = related_.find(id);
  return it == related_.end() ? none : it->second;
}

bool RelatedPairs::Related(int64_t a, int64_t b) const { return Of(a).count(b) > 0; }

torch::Tensor RelatedPairs::Mask(const torch::Tensor& rows, const torch::Tensor& columns) const {
  const torch::Tensor r = rows.to(torch::kCPU, torch::kLong).contiguous();
  const torch::Tensor c = columns.to(torch::kCPU, torch::kLong).contiguous();
  torch::Tensor mask = torch::zeros({r.numel(), c.numel()}, torch::kBool);
  const int64_t* row = r.data_ptr<int64_t>();
  const int64_t* column = c.data_ptr<int64_t>();
  bool* out = mask.data_ptr<bool>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    const std::unordered_set<int64_t>& of = Of(row[i]);
    if (of.empty()) continue;
    for (int64_t j = 0; j < c.numel(); ++j) out[i * c.numel() + j] = of.count(column[j]) > 0;
  }
  return mask;
}

void Backward(const Objective& objective, double scale, const std::function<void(bool last)>& prepare) {
  if (objective.backward) {
    objective.backward(scale, prepare);
    return;
  }
  prepare(true);
  (objective.loss * scale).backward();
}

namespace {

// Contrastive's data-parallel form under `rule`.
Objective GatheredContrastive(const ContrastivePairs& pairs, const model::Temperature& temperature,
                              dist::ProcessGroup& group, const RelatedPairs* related, RelatedCandidates rule) {
  const dist::Gathered sources = dist::AllGatherWithGrad(pairs.sources, group);
  const dist::Gathered targets = dist::AllGatherWithGrad(pairs.targets, group);
  const dist::Gathered negatives = dist::AllGatherWithGrad(pairs.negatives, group);
  const ContrastivePairs pool{sources.all,
                              targets.all,
                              GatherIds(pairs.source_ids, sources.counts, group),
                              GatherIds(pairs.target_ids, targets.counts, group),
                              negatives.all,
                              GatherIds(pairs.negative_ids, negatives.counts, group)};
  const torch::Tensor mine =
      torch::arange(pairs.sources.size(0), torch::TensorOptions(torch::kLong).device(pairs.sources.device())) +
      sources.offset;
  const ContrastiveTotals sums = ContrastiveSums(pairs, mine, pool, temperature, related, rule);
  Totals totals(group);
  return ContrastiveObjective(sums, 2 * pairs.sources.size(0), totals, temperature);
}

// The same with every pair in this process.
Objective ContrastiveHere(const ContrastivePairs& pairs, const model::Temperature& temperature,
                          const RelatedPairs* related, RelatedCandidates rule) {
  const torch::Tensor mine =
      torch::arange(pairs.sources.size(0), torch::TensorOptions(torch::kLong).device(pairs.sources.device()));
  const ContrastiveTotals sums = ContrastiveSums(pairs, mine, pairs, temperature, related, rule);
  const double queries = 2.0 * static_cast<double>(pairs.sources.size(0));
  Objective objective;
  objective.loss = sums.loss / queries;
  objective.value = objective.loss.item<double>();
  objective.parts = {{"infonce", objective.value},
                     {"top1", sums.top1.item<double>() / queries},
                     {"mrr", sums.reciprocal_ranks.item<double>() / queries}};
  if (temperature.learned()) objective.parts["temperature"] = temperature.value();
  return objective;
}

}  // namespace

Objective Contrastive(const ContrastivePairs& pairs, const model::Temperature& temperature, dist::ProcessGroup& group,
                      const RelatedPairs* related) {
  return GatheredContrastive(pairs, temperature, group, related, RelatedCandidates::kLeftOut);
}

Objective ContrastiveReport(double infonce, double top1, double mrr, std::optional<double> log_scale) {
  Objective objective;
  objective.value = infonce;
  objective.parts = {{"infonce", infonce}, {"top1", top1}, {"mrr", mrr}};
  if (log_scale) objective.parts["temperature"] = model::Temperature::OfLogScale(*log_scale);
  return objective;
}

ContrastiveTotals ContrastiveSumsHere(const ContrastivePairs& pairs, const model::Temperature& temperature) {
  const torch::Tensor mine =
      torch::arange(pairs.sources.size(0), torch::TensorOptions(torch::kLong).device(pairs.sources.device()));
  return ContrastiveSums(pairs, mine, pairs, temperature, nullptr, RelatedCandidates::kLeftOut);
}

Objective ContrastiveInOneProcess(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                  const RelatedPairs* related) {
  return ContrastiveHere(pairs, temperature, related, RelatedCandidates::kLeftOut);
}

Objective MultiPositiveContrastive(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                   dist::ProcessGroup& group, const RelatedPairs& related) {
  return GatheredContrastive(pairs, temperature, group, &related, RelatedCandidates::kPositive);
}

Objective MultiPositiveInOneProcess(const ContrastivePairs& pairs, const model::Temperature& temperature,
                                    const RelatedPairs& related) {
  return ContrastiveHere(pairs, temperature, &related, RelatedCandidates::kPositive);
}

BlockPoolSpread MeasureBlockPool(const torch::Tensor& vectors) {
  torch::NoGradGuard no_grad;
  const torch::Tensor v = vectors.detach().to(torch::kCPU, torch::kFloat64);
  const int64_t N = v.size(0);
  BlockPoolSpread spread;
  if (N < 2) return spread;
  const torch::Tensor unit = v / v.norm(2, 1, true).clamp_min(1e-12);
  const torch::Tensor gram = unit.mm(unit.t());
  spread.mean_cosine = (gram.sum() - gram.diagonal().sum()).item<double>() / static_cast<double>(N * (N - 1));
  const torch::Tensor singular = torch::linalg_svdvals(v);
  const torch::Tensor p = singular / singular.sum().clamp_min(1e-300);
  spread.effective_rank = torch::exp(-(p * p.clamp_min(1e-300).log()).sum()).item<double>();
  return spread;
}

SmithSums SmithPretrainingSums(model::SmithPretraining& model, const model::BlockTensors& batch, bool sentence_blocks,
                                dist::ProcessGroup& group, bool detach_block_targets) {
  const bool bucketed = batch.layout.counts.defined();
  const auto out = model->forward(batch, sentence_blocks);
  SmithSums sums;
  sums.lm = model->LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/true, out.lm_valid);
  sums.lm_rows = out.lm_labels.size(0);
  if (!sentence_blocks) return sums;
  // This rank's predictions against every rank's original block vectors
  // (detached on every rank alike, so no rank waits in the gather's backward).
  const int64_t P = out.block_predictions.size(0);
  const dist::Gathered pool = dist::AllGatherWithGrad(out.block_originals, group);
  torch::Tensor positive = torch::arange(P, batch.tokens.options()) + pool.offset;
  if (bucketed) {
    // Filler masked blocks predict nothing (ignored labels, never a top-1)
    // and are no rank's candidates.
    const torch::Tensor mine = torch::arange(P, batch.tokens.options()).lt(batch.layout.counts[3]);
    positive = positive.masked_fill(mine.logical_not(), data::kIgnoreLabel);
    torch::NoGradGuard no_grad;
    sums.pooled_real = dist::AllGatherWithGrad(mine.to(out.block_originals.scalar_type()), group).all.gt(0.5);
  }
  sums.targets = pool.all.detach();
  torch::Tensor scores;
  sums.block = model::SentenceBlockLoss(out.block_predictions, detach_block_targets ? sums.targets : pool.all, positive,
                                        /*sum=*/true, &scores, sums.pooled_real);
  sums.top1 = scores.argmax(1).eq(positive).sum().to(torch::kFloat64);
  sums.block_rows = P;
  return sums;
}

std::function<std::map<std::string, double>()> BlockPoolDiagnostics(const SmithSums& sums) {
  return [targets = sums.targets, pooled_real = sums.pooled_real] {
    const BlockPoolSpread spread = MeasureBlockPool(pooled_real.defined() ? targets.index({pooled_real}) : targets);
    return std::map<std::string, double>{{"block_cosine", spread.mean_cosine}, {"block_rank", spread.effective_rank}};
  };
}

Objective SmithPretraining(model::SmithPretraining& model, const model::BlockTensors& batch, bool sentence_blocks,
                           dist::ProcessGroup& group, bool detach_block_targets, const data::StepCounts* real) {
  // A step bucket's fillers are told apart on the device by the layout's
  // real counts (masks, no sync) and counted on the host by `real`.
  const bool bucketed = batch.layout.counts.defined();
  TORCH_CHECK(bucketed == (real != nullptr),
              bucketed ? "a batch padded to its step bucket needs its real counts (data::CountStep)"
                       : "real counts are for a batch padded to its step bucket");
  const SmithSums sums = SmithPretrainingSums(model, batch, sentence_blocks, group, detach_block_targets);
  Totals totals(group);
  const int lm_slot = totals.Add(sums.lm, bucketed ? real->M : sums.lm_rows);
  int block_slot = -1, top1_slot = -1;
  if (sentence_blocks) {
    const int64_t predicted = bucketed ? real->P : sums.block_rows;
    block_slot = totals.Add(sums.block, predicted);
    top1_slot = totals.Add(sums.top1, predicted);
  }
  totals.Reduce();
  Objective objective;
  objective.loss = totals.Scaled(sums.lm, lm_slot);
  objective.parts["lm"] = totals.mean(lm_slot);
  if (sentence_blocks) {
    objective.loss = objective.loss + totals.Scaled(sums.block, block_slot);
    objective.parts["block"] = totals.mean(block_slot);
  }
  for (const auto& [name, value] : objective.parts) objective.value += value;
  if (sentence_blocks) {
    // Not loss terms: how often the true block scores highest (from the
    // loss's own scores, in the same all-reduce), and, on logged steps only
    // (an SVD of the whole pool), how alike the candidate targets are. The
    // pool is every rank's, so these are the same on every rank.
    objective.parts["block_top1"] = totals.mean(top1_slot);
    objective.diagnostics = BlockPoolDiagnostics(sums);
  }
  return objective;
}

namespace {

// DocSplit over the views' unit vectors (2B, C), first halves then second,
// and the word LM's summed loss over `lm_count` predicted tokens (undefined:
// no LM term).
Objective DocSplitViews(const torch::Tensor& vectors, const torch::Tensor& lm, int64_t lm_count,
                        dist::ProcessGroup& group, double temperature, double lm_weight) {
  const int64_t V = vectors.size(0), B = V / 2;
  TORCH_CHECK(V == 2 * B, "DocSplit needs both halves of every document, got ", V, " views");
  const dist::Gathered pool = dist::AllGatherWithGrad(vectors, group);
  const torch::Tensor local = torch::arange(V, torch::TensorOptions().dtype(torch::kLong).device(vectors.device()));
  const torch::Tensor nce = model::DocSplitLoss(vectors, pool.all, local + pool.offset, (local + B) % V + pool.offset,
                                                temperature, /*sum=*/true);
  Totals totals(group);
  const int nce_slot = totals.Add(nce, V);
  const int lm_slot = lm.defined() ? totals.Add(lm, lm_count) : -1;
  totals.Reduce();
  Objective objective;
  objective.loss = totals.Scaled(nce, nce_slot);
  objective.parts = {{"infonce", totals.mean(nce_slot)}};
  objective.value = totals.mean(nce_slot);
  if (lm.defined()) {
    objective.loss = objective.loss + lm_weight * totals.Scaled(lm, lm_slot);
    objective.parts["lm"] = totals.mean(lm_slot);
    objective.value += lm_weight * totals.mean(lm_slot);
  }
  return objective;
}

}  // namespace

Objective DocSplit(model::SmithPretraining& model, const model::BlockTensors& views, dist::ProcessGroup& group,
                   double temperature, double lm_weight, const data::StepCounts* real) {
  // A bucket's fillers are blocks, tokens and predicted rows, never views:
  // the contrastive term is over the real views alone; the LM's mean counts
  // the real predicted words (`real`), its sum leaves the filler rows out.
  const bool bucketed = views.layout.counts.defined();
  TORCH_CHECK(bucketed == (real != nullptr),
              bucketed ? "views padded to their step bucket need their real counts (data::CountStep)"
                       : "real counts are for views padded to their step bucket");
  const bool lm = lm_weight != 0;
  const auto out = model->ForwardViews(views, lm);
  return DocSplitViews(
      out.vectors,
      lm ? model->LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/true, out.lm_valid) : torch::Tensor(),
      lm ? (bucketed ? real->M : out.lm_labels.size(0)) : 0, group, temperature, lm_weight);
}

Objective DocSplit(model::FlatPretraining& model, const data::FlatBatch& views, dist::ProcessGroup& group,
                   double temperature, double lm_weight) {
  const auto out = model->ForwardViews(views, group.device(), lm_weight != 0);
  const bool lm = lm_weight != 0 && out.lm_hidden.defined();
  return DocSplitViews(out.vectors,
                       lm ? model->LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/true) : torch::Tensor(),
                       lm ? out.lm_labels.size(0) : 0, group, temperature, lm_weight);
}

namespace {

// DocSplit by gradient caching: `run(i)` gives chunk i's views (its first
// halves, then its second) and, with an LM term, its summed LM loss and
// count. `run` is called again by the objective's backward, after this
// returns, so it must own (or outlive) what it reads.
struct Views {
  torch::Tensor vectors, lm;
  int64_t lm_count = 0;
};
Objective CachedDocSplit(int64_t chunks, const std::function<Views(int64_t)>& run, dist::ProcessGroup& group,
                         double temperature, double lm_weight) {
  const bool lm = lm_weight != 0;
  return CachedObjective(
      chunks,
      [run, lm](int64_t i) {
        const Views views = run(i);
        const int64_t half = views.vectors.size(0) / 2;
        ChunkOutputs out{{views.vectors.narrow(0, 0, half), views.vectors.narrow(0, half, half)}, {}, {}};
        if (lm) {
          out.sums.push_back(views.lm);
          out.counts.push_back(views.lm_count);
        }
        return out;
      },
      [&, lm](const ChunkOutputs& all) {
        return DocSplitViews(torch::cat({all.rows[0], all.rows[1]}), lm ? all.sums[0] : torch::Tensor(),
                             lm ? all.counts[0] : 0, group, temperature, lm_weight);
      },
      group.device());
}

}  // namespace

Objective DocSplit(model::SmithPretraining& model, const std::vector<data::BlockBatch>& chunks,
                   dist::ProcessGroup& group, double temperature, double lm_weight) {
  TORCH_CHECK(!chunks.empty(), "DocSplit needs a batch");
  const torch::Device device = group.device();
  if (chunks.size() == 1) return DocSplit(model, model::ToTensors(chunks[0], device), group, temperature, lm_weight);
  const bool lm = lm_weight != 0;
  // The re-runs come after this returns: the lambda owns what it reads.
  auto batches = std::make_shared<const std::vector<data::BlockBatch>>(chunks);
  return CachedDocSplit(
      static_cast<int64_t>(chunks.size()),
      [impl = model.ptr(), batches, device, lm](int64_t i) {
        const auto out = impl->ForwardViews(model::ToTensors((*batches)[i], device), lm);
        if (!lm) return Views{out.vectors, {}, 0};
        return Views{out.vectors, impl->LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/true),
                     out.lm_labels.size(0)};
      },
      group, temperature, lm_weight);
}

Objective DocSplit(model::FlatPretraining& model, const std::vector<data::FlatBatch>& chunks, dist::ProcessGroup& group,
                   double temperature, double lm_weight) {
  TORCH_CHECK(!chunks.empty(), "DocSplit needs a batch");
  const torch::Device device = group.device();
  if (chunks.size() == 1) return DocSplit(model, chunks[0], group, temperature, lm_weight);
  // Views read unmasked have no LM term, as in the plain form.
  const double weight = chunks[0].lm_labels.empty() ? 0.0 : lm_weight;
  // The re-runs come after this returns: the lambda owns what it reads.
  auto batches = std::make_shared<const std::vector<data::FlatBatch>>(chunks);
  return CachedDocSplit(
      static_cast<int64_t>(chunks.size()),
      [impl = model.ptr(), batches, device, weight](int64_t i) {
        const auto out = impl->ForwardViews((*batches)[i], device, weight != 0);
        if (weight == 0) return Views{out.vectors, {}, 0};
        return Views{out.vectors, impl->LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/true),
                     out.lm_labels.size(0)};
      },
      group, temperature, weight);
}

Objective WordLm(model::FlatPretraining& model, const data::FlatBatch& batch, dist::ProcessGroup& group) {
  TORCH_CHECK(!batch.lm_labels.empty(), "the word LM needs a batch with masks (data::BuildFlatBatch with MaskOptions)");
  const auto out = model->forward(batch, group.device());
  const torch::Tensor lm = model->LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/true);
  Totals totals(group);
  const int slot = totals.Add(lm, out.lm_labels.size(0));
  totals.Reduce();
  Objective objective;
  objective.loss = totals.Scaled(lm, slot);
  objective.value = totals.mean(slot);
  objective.parts = {{"lm", objective.value}};
  return objective;
}

Objective Sdr(model::SentenceEncoder& model, const model::SdrTensors& batch, dist::ProcessGroup& group) {
  const auto out = model->ForwardPairs(batch);
  const dist::Gathered partners = dist::AllGatherWithGrad(out.partners, group);
  const torch::Tensor contrastive = model::SdrContrastiveLoss(out.anchors, partners.all, batch.pair, batch.label,
                                                              model->config().margin, /*sum=*/true);
  const torch::Tensor lm = model::MaskedLmLoss(out.lm_logits, out.lm_labels, /*sum=*/true);
  Totals totals(group);
  const int contrastive_slot = totals.Add(contrastive, out.anchors.size(0));
  const int lm_slot = totals.Add(lm, out.lm_labels.size(0));
  totals.Reduce();
  Objective objective;
  objective.loss = totals.Scaled(contrastive, contrastive_slot) + totals.Scaled(lm, lm_slot);
  objective.parts = {{"contrastive", totals.mean(contrastive_slot)}, {"lm", totals.mean(lm_slot)}};
  objective.value = totals.mean(contrastive_slot) + totals.mean(lm_slot);
  return objective;
}

std::pair<torch::Tensor, torch::Tensor> PairSums(const torch::Tensor& logits, const torch::Tensor& labels) {
  const torch::Tensor target = labels.to(logits.dtype());
  const torch::Tensor loss = torch::nn::functional::binary_cross_entropy_with_logits(
      logits, target, torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum));
  return {loss, logits.detach().ge(0).to(target.dtype()).eq(target).sum()};
}

Objective Siamese(const torch::Tensor& logits, const torch::Tensor& labels, dist::ProcessGroup& group) {
  const auto [loss, correct] = PairSums(logits, labels);
  Totals totals(group);
  const int slot = totals.Add(loss, labels.size(0));
  const int accuracy = totals.Add(correct, labels.size(0));
  totals.Reduce();
  Objective objective;
  objective.loss = totals.Scaled(loss, slot);
  objective.value = totals.mean(slot);
  objective.parts = {{"bce", objective.value}, {"accuracy", totals.mean(accuracy)}};
  return objective;
}

}  // namespace docmatch::train
