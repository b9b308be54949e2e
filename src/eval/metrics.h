// Evaluation metrics, each defined once (DESIGN.md's metric list).
//
// Pair classification (SMITH, SMASH): accuracy, precision, recall, F1 at a
// threshold on the pair score (score >= threshold means "related"); the
// threshold is chosen on the validation split by ChooseThreshold.
//
// Ranking (SMASH: P@1, MRR, MAP; SDR: MPR, MRR, recall@k, which the SDR
// paper calls HR@k; BEIR: nDCG@10), per query over its candidates, then
// averaged over queries, each as trec_eval defines it:
//  * ties are broken against the relevant candidates, so a scorer that cannot
//    tell documents apart earns nothing by luck (trec_eval breaks them by
//    document id instead: the two agree wherever scores differ);
//  * P@k: relevant candidates in the top k, over k (trec_eval's P_k);
//  * MRR: 1 / rank of the first relevant (recip_rank); MRR@10 counts it only
//    within the top 10, 0 beyond (MS MARCO's MRR@10);
//  * MAP: average precision at each relevant candidate's rank;
//  * nDCG@10: sum over the top 10 of gain / log2(rank + 1), over the same sum
//    of the ideal order of the query's gains (trec_eval's ndcg_cut_10: the
//    gain is the relevance grade itself, 1 for an ungraded list);
//  * recall@k: the share of the query's relevant candidates ranked in the
//    top k (trec_eval's recall_k);
//  * MPR: mean over relevant candidates of (rank - 1) / (N - 1), 0 = top,
//    1 = bottom (lower is better); JSON also gives "mpr_percentile", 1 - MPR,
//    the SDR paper's higher-is-better convention (1 = top);
//  * queries without a relevant candidate are skipped and counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
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
  // The relevant candidates' grades (nDCG's gains), same length; empty: 1 each.
  std::vector<double> grades;
  // Grades of relevant documents that are not candidates (prepare skipped
  // them): never found, they still count in recall's, MAP's and nDCG's
  // denominators, as trec_eval counts a relevant document missing from a run.
  std::vector<double> absent;
};

struct RankingMetrics {
  int64_t queries = 0;  // evaluated
  int64_t skipped = 0;  // without any relevant candidate
  double p_at_1 = 0, p_at_10 = 0, mrr = 0, mrr_at_10 = 0, map = 0, ndcg_at_10 = 0, mpr = 0;
  std::map<int, double> recall;  // k -> recall@k
  // Per query, in input order: the 1-based rank of its best relevant
  // candidate (ties broken against it, as above), 0 for a skipped query. The
  // query's reciprocal rank is its inverse. Not part of ToJson.
  std::vector<int64_t> first_relevant_rank;
  nlohmann::json ToJson() const;
  // The means times the query count, in a fixed order after the two counts:
  // the sums of several blocks of queries (or ranks) add, and FromSums turns
  // their total back into means.
  std::vector<double> Sums() const;
  static RankingMetrics FromSums(const std::vector<double>& sums, const std::vector<int>& ks);
};

// RankingMetrics' means, in the order Sums keeps them.
inline constexpr double RankingMetrics::*kRankingMeans[] = {
    &RankingMetrics::p_at_1, &RankingMetrics::p_at_10,    &RankingMetrics::mrr, &RankingMetrics::mrr_at_10,
    &RankingMetrics::map,    &RankingMetrics::ndcg_at_10, &RankingMetrics::mpr};

RankingMetrics EvaluateRanking(const std::vector<RankingQuery>& queries, const std::vector<int>& ks = {1, 10, 100});

// The weights a fused ranking's share is chosen from (eval --lexical-weight
// auto, choose), and the rule: the first best, so the smaller weight on a tie.
inline constexpr double kFusionWeights[] = {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1};
size_t FirstBest(const std::vector<double>& values);

// Queries ranked at a time against N documents, so that each of `matrices`
// (Q, N) score matrices stays near 4M numbers.
int64_t QueriesPerBlock(int64_t N, int64_t matrices = 1);

// One line of a TREC run file, `query Q0 document rank score docmatch` and a
// newline, as trec_eval, ranx and ir-measures read it; the score keeps every
// digit of the double. An id holding whitespace would split its field: an
// Error naming it.
std::string TrecRunLine(const std::string& query, const std::string& document, int64_t rank, double score);

}  // namespace docmatch::eval
