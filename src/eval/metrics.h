// Evaluation metrics, each defined once (DESIGN.md's metric list).
//
// Pair classification (SMITH, SMASH): accuracy, precision, recall, F1 at a
// threshold on the pair score (score >= threshold means "related"); the
// threshold is chosen on the validation split by ChooseThreshold.
//
// Ranking (SMASH: P@1, MRR, MAP; SDR: MPR, MRR, HR@k), per query over its
// candidates, then averaged over queries:
//  * ties are broken against the relevant candidates, so a scorer that cannot
//    tell documents apart earns nothing by luck;
//  * P@1: the top candidate is relevant; MRR: 1 / rank of the first relevant;
//    MAP: average precision at each relevant candidate's rank;
//  * MPR: mean over relevant candidates of (rank - 1) / (N - 1), 0 = top,
//    1 = bottom (lower is better); JSON also gives "mpr_percentile", 1 - MPR,
//    the SDR paper's higher-is-better convention (1 = top);
//  * HR@k: the share of the query's relevant candidates ranked in the top k;
//  * queries without a relevant candidate are skipped and counted.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

namespace docmatch::eval {

struct ClassificationMetrics {
  double threshold = 0;
  double accuracy = 0, precision = 0, recall = 0, f1 = 0;
  int64_t true_positives = 0, false_positives = 0, true_negatives = 0, false_negatives = 0;
  nlohmann::json ToJson() const;
};

// labels: 1 related, 0 not. Precision (recall) is 0 when nothing is predicted
// (nothing is) positive.
ClassificationMetrics Classify(const std::vector<double>& scores, const std::vector<int>& labels, double threshold);

enum class ThresholdObjective { kAccuracy, kF1 };
// The threshold (a midpoint between neighbouring distinct scores, or below
// or above them all) that maximises the objective on these pairs; ties go to
// the lowest such threshold.
double ChooseThreshold(const std::vector<double>& scores, const std::vector<int>& labels,
                       ThresholdObjective objective = ThresholdObjective::kAccuracy);

struct RankingQuery {
  std::vector<double> scores;  // one per candidate (the query itself excluded)
  std::vector<bool> relevant;  // same length
};

struct RankingMetrics {
  int64_t queries = 0;  // evaluated
  int64_t skipped = 0;  // without any relevant candidate
  double p_at_1 = 0, mrr = 0, map = 0, mpr = 0;
  std::map<int, double> hit_ratio;  // k -> HR@k
  // Per query, in input order: the 1-based rank of its best relevant
  // candidate (ties broken against it, as above), 0 for a skipped query. The
  // query's reciprocal rank is its inverse. Not part of ToJson.
  std::vector<int64_t> first_relevant_rank;
  nlohmann::json ToJson() const;
};

RankingMetrics EvaluateRanking(const std::vector<RankingQuery>& queries, const std::vector<int>& ks = {1, 10, 100});

}  // namespace docmatch::eval
