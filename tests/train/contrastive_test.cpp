// Contrastive fine-tuning's objective (train/objectives.h, Contrastive) against
// a hand formulation in float64: every score, exclusion and log-sum-exp
// written out in scalar operations, with documents that occur twice, a pair
// and its reverse, and hard negatives that repeat a positive. Loss, top-1 and
// gradients must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "train/objectives.h"

namespace docmatch::train {
namespace {

// Whether candidate document `candidate` (from pair `j`, or a hard negative
// when j < 0) is left out for the query of pair `i` whose own document is
// `mine` and whose positive is `partner`; `same_side` holds the document on the
// query's side of pair j.
// With `related` (--drop-related), also a candidate labelled related to `mine`.
bool LeftOut(int64_t i, int64_t j, int64_t mine, int64_t partner, int64_t candidate, int64_t same_side,
             const std::set<std::pair<int64_t, int64_t>>* related = nullptr) {
  if (j == i) return false;                                    // the positive itself
  if (candidate == partner || candidate == mine) return true;  // the same document again
  if (related && (related->count({mine, candidate}) || related->count({candidate, mine}))) return true;
  return j >= 0 && same_side == mine;  // another positive of the query's document
}

struct Hand {
  torch::Tensor loss;  // mean over both directions
  double top1 = 0;
  double mrr = 0;  // mean of 1 / (1 + the candidates scored at or above the positive)
};

// `scale`: 1 / temperature, a float64 scalar (a leaf with a gradient for the
// learned temperature).
Hand HandFormulation(const ContrastivePairs& p, const torch::Tensor& scale,
                     const std::set<std::pair<int64_t, int64_t>>* related = nullptr) {
  const int64_t B = p.sources.size(0), H = p.negatives.size(0);
  const auto id = [](const torch::Tensor& ids, int64_t k) { return ids[k].item<int64_t>(); };
  const auto cosine = [](const torch::Tensor& a, const torch::Tensor& b) {
    return torch::dot(a, b) / (torch::sqrt(torch::dot(a, a)) * torch::sqrt(torch::dot(b, b)));
  };
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  double top1 = 0, mrr = 0;
  for (int direction = 0; direction < 2; ++direction) {
    const bool forward = direction == 0;  // source -> targets and negatives
    const torch::Tensor& queries = forward ? p.sources : p.targets;
    const torch::Tensor& candidates = forward ? p.targets : p.sources;
    const torch::Tensor& query_ids = forward ? p.source_ids : p.target_ids;
    const torch::Tensor& candidate_ids = forward ? p.target_ids : p.source_ids;
    for (int64_t i = 0; i < B; ++i) {
      const int64_t mine = id(query_ids, i), partner = id(candidate_ids, i);
      torch::Tensor sum = torch::zeros({}, torch::kFloat64);
      const torch::Tensor positive = cosine(queries[i], candidates[i]) * scale;
      bool best = true;
      int64_t ahead = 0;
      for (int64_t j = 0; j < B; ++j) {
        if (LeftOut(i, j, mine, partner, id(candidate_ids, j), id(query_ids, j), related)) continue;
        const torch::Tensor s = cosine(queries[i], candidates[j]) * scale;
        sum = sum + torch::exp(s);
        if (j != i && s.item<double>() > positive.item<double>()) best = false;
        if (j != i && s.item<double>() >= positive.item<double>()) ++ahead;
      }
      for (int64_t n = 0; forward && n < H; ++n) {
        if (LeftOut(i, -1, mine, partner, id(p.negative_ids, n), -1, related)) continue;
        const torch::Tensor s = cosine(queries[i], p.negatives[n]) * scale;
        sum = sum + torch::exp(s);
        if (s.item<double>() > positive.item<double>()) best = false;
        if (s.item<double>() >= positive.item<double>()) ++ahead;
      }
      total = total + (torch::log(sum) - positive);
      top1 += best ? 1 : 0;
      mrr += 1.0 / static_cast<double>(1 + ahead);
    }
  }
  return {total / (2.0 * B), top1 / (2.0 * B), mrr / (2.0 * B)};
}

// Six pairs of random float64 vectors (5 dimensions, gradients wanted), from
// the current seed. Pairs 0 and 3 share their source (each other's targets are
// known positives), pairs 0 and 4 share their target, pair 2's target is pair
// 1's source and pair 5 is pair 1 reversed. The 4 hard negatives repeat target
// 10 and source 2.
ContrastivePairs PairsWithDuplicatesAndHardNegatives() {
  const auto opts = torch::TensorOptions(torch::kFloat64);
  const int64_t B = 6, H = 4, C = 5;
  return {torch::randn({B, C}, opts).requires_grad_(),      torch::randn({B, C}, opts).requires_grad_(),
          torch::tensor({0, 1, 2, 0, 3, 11}, torch::kLong), torch::tensor({10, 11, 1, 12, 10, 1}, torch::kLong),
          torch::randn({H, C}, opts).requires_grad_(),      torch::tensor({20, 10, 2, 21}, torch::kLong)};
}

TEST(Contrastive, EqualsAHandFormulationWithDuplicatesAndHardNegativesGradientsIncluded) {
  torch::manual_seed(7);
  ContrastivePairs p = PairsWithDuplicatesAndHardNegatives();
  for (double temperature : {0.05, 1.0}) {
    for (auto* t : {&p.sources, &p.targets, &p.negatives}) t->mutable_grad() = torch::Tensor();
    const Objective objective = ContrastiveInOneProcess(p, temperature);
    objective.loss.backward();
    const torch::Tensor gs = p.sources.grad().clone(), gt = p.targets.grad().clone(), gn = p.negatives.grad().clone();
    for (auto* t : {&p.sources, &p.targets, &p.negatives}) t->mutable_grad() = torch::Tensor();
    const Hand hand = HandFormulation(p, torch::tensor(1.0 / temperature, torch::kFloat64));
    hand.loss.backward();

    EXPECT_NEAR(objective.value, hand.loss.item<double>(), 1e-12 * std::abs(hand.loss.item<double>()))
        << "temperature " << temperature;
    EXPECT_DOUBLE_EQ(objective.parts.at("top1"), hand.top1) << "temperature " << temperature;
    EXPECT_NEAR(objective.parts.at("mrr"), hand.mrr, 1e-12) << "temperature " << temperature;
    EXPECT_LT(hand.mrr, 1.0);  // some positive is not first: the reciprocal ranks are not all 1
    EXPECT_TRUE(torch::allclose(gs, p.sources.grad(), 1e-10, 1e-12)) << (gs - p.sources.grad()).abs().max();
    EXPECT_TRUE(torch::allclose(gt, p.targets.grad(), 1e-10, 1e-12)) << (gt - p.targets.grad()).abs().max();
    EXPECT_TRUE(torch::allclose(gn, p.negatives.grad(), 1e-10, 1e-12)) << (gn - p.negatives.grad()).abs().max();
  }
  // The repeated negative 10 is left out only for the queries whose positive
  // it is (pairs 0 and 4); the other sources still push it away.
  EXPECT_GT(p.negatives.grad()[1].abs().sum().item<double>(), 0.0);
}

// The learned temperature (finetune --learn-temperature): the same loss as the
// fixed one at the same value, and d loss / d log(1/tau) equal to the hand
// formulation's through exp(log_scale); above the cap of 100 the scale stays
// at 100 and the gradient is 0.
TEST(Contrastive, ALearnedTemperatureGetsTheHandFormulationsGradient) {
  torch::manual_seed(11);
  const auto opts = torch::TensorOptions(torch::kFloat64);
  const int64_t B = 5, H = 2, C = 4;
  ContrastivePairs p{torch::randn({B, C}, opts),
                     torch::randn({B, C}, opts),
                     torch::tensor({0, 1, 2, 0, 4}, torch::kLong),
                     torch::tensor({10, 11, 12, 13, 1}, torch::kLong),
                     torch::randn({H, C}, opts),
                     torch::tensor({20, 11}, torch::kLong)};
  for (double tau : {0.07, 0.5}) {
    const torch::Tensor log_scale = torch::tensor(std::log(1.0 / tau), opts).requires_grad_();
    const Objective learned = ContrastiveInOneProcess(p, model::Temperature::Learned(log_scale));
    learned.loss.backward();
    const torch::Tensor hand_log_scale = torch::tensor(std::log(1.0 / tau), opts).requires_grad_();
    const Hand hand = HandFormulation(p, hand_log_scale.exp());
    hand.loss.backward();
    EXPECT_NEAR(learned.value, hand.loss.item<double>(), 1e-12) << "tau " << tau;
    EXPECT_NEAR(learned.value, ContrastiveInOneProcess(p, tau).value, 1e-12) << "tau " << tau;
    EXPECT_NEAR(learned.parts.at("temperature"), tau, 1e-15);
    const double g = log_scale.grad().item<double>(), expected = hand_log_scale.grad().item<double>();
    EXPECT_GT(std::abs(expected), 1e-3) << "tau " << tau;  // the check below must be able to fail
    EXPECT_NEAR(g, expected, 1e-10 * std::abs(expected)) << "tau " << tau;
  }
  const torch::Tensor above = torch::tensor(std::log(250.0), opts).requires_grad_();
  const Objective capped = ContrastiveInOneProcess(p, model::Temperature::Learned(above));
  capped.loss.backward();
  EXPECT_NEAR(capped.value, ContrastiveInOneProcess(p, 0.01).value, 1e-12);
  EXPECT_NEAR(capped.parts.at("temperature"), 0.01, 1e-15);
  EXPECT_EQ(above.grad().item<double>(), 0.0);
  EXPECT_EQ(ContrastiveInOneProcess(p, 0.1).parts.count("temperature"), 0u);
}

TEST(Contrastive, DropRelatedLeavesOutLabelledRelatedCandidatesAsAHandFormulation) {
  // Training pairs label 0-12, 1-10 and 3-2 related and 0-20 unrelated. With
  // the relation, source 1 no longer sees target 10 (pairs 0 and 4) nor hard
  // negative 10, source 3 no longer sees hard negative 2, and target 10 no
  // longer sees source 1; 0-12 changes nothing (pair 3 shares pair 0's
  // source, so 12 was left out already). Loss, top-1 and gradients equal the
  // hand formulation with the same relation, and differ from the loss without.
  struct Pair {
    int64_t source, target;
    int label;
  };
  const std::vector<Pair> labelled = {{0, 12, 1}, {1, 10, 1}, {3, 2, 1}, {0, 20, 0}};
  const RelatedPairs relation(labelled);
  std::set<std::pair<int64_t, int64_t>> related;
  for (const Pair& p : labelled)
    if (p.label == 1) related.insert({p.source, p.target});
  EXPECT_TRUE(relation.Related(2, 3) && relation.Related(3, 2) && !relation.Related(0, 20));
  const torch::Tensor mask = relation.Mask(torch::tensor({1, 0, 2}, torch::kLong), torch::tensor({10, 12, 3, 20}));
  EXPECT_TRUE(torch::equal(
      mask, torch::tensor({{true, false, false, false}, {false, true, false, false}, {false, false, true, false}})));

  torch::manual_seed(11);
  const auto opts = torch::TensorOptions(torch::kFloat64);
  ContrastivePairs p = PairsWithDuplicatesAndHardNegatives();
  const double tau = 0.1;
  const Objective got = ContrastiveInOneProcess(p, tau, &relation);
  const Objective plain = ContrastiveInOneProcess(p, tau);
  const Hand hand = HandFormulation(p, torch::tensor(1.0 / tau, opts), &related);
  EXPECT_NEAR(got.value, hand.loss.item<double>(), 1e-12);
  EXPECT_NEAR(got.parts.at("top1"), hand.top1, 1e-12);
  EXPECT_GT(std::abs(got.value - plain.value), 1e-6) << "the relation left nothing out: the check could not fail";
  const std::vector<torch::Tensor> inputs = {p.sources, p.targets, p.negatives};
  const auto ours = torch::autograd::grad({got.loss}, inputs);
  const auto theirs = torch::autograd::grad({hand.loss}, inputs);
  for (size_t k = 0; k < inputs.size(); ++k) EXPECT_TRUE(torch::allclose(ours[k], theirs[k], 1e-10, 1e-12)) << k;
}

TEST(Contrastive, AnExcludedDuplicateDoesNotChangeTheLoss) {
  // A second copy of the positive document among the candidates (same id)
  // must not act as a negative for the query whose positive it is; for the
  // other queries it is an ordinary negative and raises their loss.
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions(torch::kFloat64);
  const torch::Tensor s = torch::randn({3, 4}, opts), t = torch::randn({3, 4}, opts);
  ContrastivePairs without{s,
                           t,
                           torch::tensor({0, 1, 2}, torch::kLong),
                           torch::tensor({5, 6, 7}, torch::kLong),
                           torch::empty({0, 4}, opts),
                           torch::empty({0}, torch::kLong)};
  ContrastivePairs with = without;
  with.negatives = t.slice(0, 0, 1) * 3.0;  // document 5 again (another view of it), as a hard negative
  with.negative_ids = torch::tensor({5}, torch::kLong);
  const double a = ContrastiveInOneProcess(without, 0.1).value, b = ContrastiveInOneProcess(with, 0.1).value;
  // Query 0 (source 0, positive 5) leaves it out; queries 1 and 2 see it as a
  // negative, so only their terms grow.
  const ContrastivePairs only0{
      s.slice(0, 0, 1), t.slice(0, 0, 1), torch::tensor({0}, torch::kLong), torch::tensor({5}, torch::kLong),
      with.negatives,   with.negative_ids};
  EXPECT_NEAR(ContrastiveInOneProcess(only0, 0.1).value, 0.0, 1e-12);  // alone with its positive: log 1 = 0
  EXPECT_GT(b, a);
}

// Multi-positive InfoNCE (finetune --loss multipositive) written out per
// query: its own partner and every candidate `related` to its document are
// positives, other copies of its document or of its partner are left out
// (and, as in Contrastive, another pair's candidate on the query's side of a
// pair with the query's document when the relation does not label it); the
// loss is log(sum over candidates kept) - log(sum over positives).
Hand MultiPositiveHand(const ContrastivePairs& p, double scale, const std::set<std::pair<int64_t, int64_t>>& related) {
  const int64_t B = p.sources.size(0), H = p.negatives.size(0);
  const auto id = [](const torch::Tensor& ids, int64_t k) { return ids[k].item<int64_t>(); };
  const auto cosine = [](const torch::Tensor& a, const torch::Tensor& b) {
    return torch::dot(a, b) / (torch::sqrt(torch::dot(a, a)) * torch::sqrt(torch::dot(b, b)));
  };
  const auto is_related = [&](int64_t a, int64_t b) { return related.count({a, b}) || related.count({b, a}); };
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  double top1 = 0;
  for (int direction = 0; direction < 2; ++direction) {
    const bool forward = direction == 0;
    const torch::Tensor& queries = forward ? p.sources : p.targets;
    const torch::Tensor& candidates = forward ? p.targets : p.sources;
    const torch::Tensor& query_ids = forward ? p.source_ids : p.target_ids;
    const torch::Tensor& candidate_ids = forward ? p.target_ids : p.source_ids;
    for (int64_t i = 0; i < B; ++i) {
      const int64_t mine = id(query_ids, i), partner = id(candidate_ids, i);
      torch::Tensor all = torch::zeros({}, torch::kFloat64), positive = torch::zeros({}, torch::kFloat64);
      double best = -1e300;
      bool best_is_positive = false;
      const auto add = [&](const torch::Tensor& vector, int64_t candidate, bool own, bool same_side) {
        const bool copy = !own && (candidate == partner || candidate == mine);
        const bool is_positive = own || (!copy && is_related(mine, candidate));
        if (copy || (!is_positive && same_side)) return;
        const torch::Tensor e = torch::exp(cosine(queries[i], vector) * scale);
        all = all + e;
        if (is_positive) positive = positive + e;
        const double s = cosine(queries[i], vector).item<double>();
        if (s > best) {
          best = s;
          best_is_positive = is_positive;
        }
      };
      for (int64_t j = 0; j < B; ++j) add(candidates[j], id(candidate_ids, j), j == i, id(query_ids, j) == mine);
      for (int64_t n = 0; forward && n < H; ++n) add(p.negatives[n], id(p.negative_ids, n), false, false);
      total = total + torch::log(all) - torch::log(positive);
      top1 += best_is_positive ? 1 : 0;
    }
  }
  return {total / (2.0 * B), top1 / (2.0 * B)};
}

TEST(MultiPositive, EqualsAHandFormulationGradientsIncludedAndIsContrastiveWithOnePositiveEach) {
  // The training pairs: each pair of PairsWithDuplicatesAndHardNegatives
  // (sources 0 1 2 0 3 11, targets 10 11 1 12 10 1) and two more labels,
  // 0-1 (source 0 meets source 1's target 11 and itself as candidates) and
  // 3-20 (hard negative 20 becomes a positive of source 3).
  struct Pair {
    int64_t source, target;
    int label;
  };
  std::vector<Pair> labelled = {{0, 10, 1}, {1, 11, 1}, {2, 1, 1}, {0, 12, 1},
                                {3, 10, 1}, {11, 1, 1}, {0, 1, 1}, {3, 20, 1}};
  torch::manual_seed(5);
  ContrastivePairs p = PairsWithDuplicatesAndHardNegatives();
  for (double tau : {0.05, 0.5}) {
    std::set<std::pair<int64_t, int64_t>> related;
    for (const Pair& l : labelled) related.insert({l.source, l.target});
    const Objective got = MultiPositiveInOneProcess(p, tau, RelatedPairs(labelled));
    const Hand hand = MultiPositiveHand(p, 1.0 / tau, related);
    EXPECT_NEAR(got.value, hand.loss.item<double>(), 1e-12 * std::abs(hand.loss.item<double>())) << tau;
    EXPECT_DOUBLE_EQ(got.parts.at("top1"), hand.top1) << tau;
    const std::vector<torch::Tensor> inputs = {p.sources, p.targets, p.negatives};
    const auto ours = torch::autograd::grad({got.loss}, inputs);
    const auto theirs = torch::autograd::grad({hand.loss}, inputs);
    for (size_t k = 0; k < inputs.size(); ++k) EXPECT_TRUE(torch::allclose(ours[k], theirs[k], 1e-10, 1e-12)) << k;
    // The extra labels made positives: the loss is not Contrastive's.
    EXPECT_GT(std::abs(got.value - ContrastiveInOneProcess(p, tau).value), 1e-6) << tau;
  }
  // Pairs whose documents are all distinct, labelled with nothing but
  // themselves: one positive a query, and Contrastive's loss and gradients.
  const auto opts = torch::TensorOptions(torch::kFloat64);
  ContrastivePairs distinct{torch::randn({4, 5}, opts).requires_grad_(), torch::randn({4, 5}, opts).requires_grad_(),
                            torch::tensor({0, 1, 2, 3}, torch::kLong),   torch::tensor({10, 11, 12, 13}, torch::kLong),
                            torch::randn({2, 5}, opts).requires_grad_(), torch::tensor({20, 21}, torch::kLong)};
  labelled = {{0, 10, 1}, {1, 11, 1}, {2, 12, 1}, {3, 13, 1}, {0, 21, 0}};
  const Objective multi = MultiPositiveInOneProcess(distinct, 0.1, RelatedPairs(labelled));
  const Objective single = ContrastiveInOneProcess(distinct, 0.1);
  EXPECT_NEAR(multi.value, single.value, 1e-14);
  EXPECT_EQ(multi.parts.at("top1"), single.parts.at("top1"));
  const std::vector<torch::Tensor> inputs = {distinct.sources, distinct.targets, distinct.negatives};
  const auto a = torch::autograd::grad({multi.loss}, inputs), b = torch::autograd::grad({single.loss}, inputs);
  for (size_t k = 0; k < inputs.size(); ++k) EXPECT_TRUE(torch::allclose(a[k], b[k], 1e-12, 1e-14)) << k;
}

}  // namespace
}  // namespace docmatch::train
