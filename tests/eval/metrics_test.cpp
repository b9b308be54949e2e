// Metric functions against hand-computed cases, ties and empty lists included.
#include "eval/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "console/error.h"
#include "eval/bootstrap.h"

namespace docmatch::eval {
namespace {

TEST(Ranking, HandComputedQueriesWithTiesAndAnEmptyRelevanceList) {
  const std::vector<RankingQuery> queries = {
      // Relevant at ranks 2 and 4 of 4.
      {{0.9, 0.8, 0.7, 0.6}, {false, true, false, true}},
      // A tie at the top: broken against the relevant candidate -> rank 2 of 3.
      {{0.5, 0.5, 0.1}, {true, false, false}},
      // No relevant candidate: skipped, counted.
      {{0.4, 0.2}, {false, false}},
      // Relevant at rank 1 of 2.
      {{0.3, 0.9}, {false, true}},
  };
  const RankingMetrics m = EvaluateRanking(queries, {1, 2, 10});
  EXPECT_EQ(m.queries, 3);
  EXPECT_EQ(m.skipped, 1);
  // P@1: only the last query.        MRR: (1/2 + 1/2 + 1) / 3
  EXPECT_DOUBLE_EQ(m.p_at_1, 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.mrr, 2.0 / 3);
  // AP: q1 (1/2 + 2/4) / 2 = 1/2; q2 1/2; q4 1.
  EXPECT_DOUBLE_EQ(m.map, 2.0 / 3);
  // Percentile ranks: q1 ((2-1)/3 + (4-1)/3) / 2 = 2/3; q2 (2-1)/2 = 1/2; q4 0.
  EXPECT_DOUBLE_EQ(m.mpr, (2.0 / 3 + 0.5 + 0.0) / 3);
  // The SDR paper's convention, 1 = top: q1 1/3, q2 1/2, q4 1.
  EXPECT_NEAR(m.ToJson()["mpr_percentile"].get<double>(), (1.0 / 3 + 0.5 + 1.0) / 3, 1e-15);
  // recall@1: 0, 0, 1. recall@2: q1 1/2, q2 1, q4 1. HR@10: all found.
  EXPECT_DOUBLE_EQ(m.recall.at(1), 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.recall.at(2), (0.5 + 1 + 1) / 3);
  EXPECT_DOUBLE_EQ(m.recall.at(10), 1.0);
}

TEST(Ranking, AConstantScorerEarnsNothingAndNoQueriesGiveZeros) {
  const RankingMetrics constant = EvaluateRanking({{{1, 1, 1, 1}, {false, false, true, false}}}, {1});
  EXPECT_DOUBLE_EQ(constant.p_at_1, 0.0);
  EXPECT_DOUBLE_EQ(constant.mrr, 0.25);
  EXPECT_DOUBLE_EQ(constant.mpr, 1.0);
  const RankingMetrics none = EvaluateRanking({}, {1});
  EXPECT_EQ(none.queries, 0);
  EXPECT_DOUBLE_EQ(none.mrr, 0.0);
  EXPECT_THROW(EvaluateRanking({{{1, 2}, {true}}}), docmatch::Error);
}

TEST(Ranking, FirstRelevantRanksPerQueryMatchACountingFormulation) {
  // Hand cases, in input order: ranks 2, 2 (a tie broken against the
  // relevant one), 0 (skipped), 1, and 1 (a tie among relevant ones only).
  const RankingMetrics hand = EvaluateRanking({{{0.9, 0.8, 0.7, 0.6}, {false, true, false, true}},
                                               {{0.5, 0.5, 0.1}, {true, false, false}},
                                               {{0.4, 0.2}, {false, false}},
                                               {{0.3, 0.9}, {false, true}},
                                               {{0.7, 0.7, 0.2}, {true, true, false}}},
                                              {1});
  EXPECT_EQ(hand.first_relevant_rank, (std::vector<int64_t>{2, 2, 0, 1, 1}));
  // A second formulation without sorting: 1 + the candidates that beat the
  // best relevant score or tie it without being relevant. Scores from five
  // values, so that ties are common.
  uint64_t state = 12345;
  auto next = [&state] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  std::vector<RankingQuery> queries;
  std::vector<int64_t> expected;
  double reciprocal_sum = 0;
  for (int q = 0; q < 200; ++q) {
    RankingQuery query;
    const size_t n = 1 + next() % 12;
    for (size_t i = 0; i < n; ++i) {
      query.scores.push_back(static_cast<double>(next() % 5) / 4);
      query.relevant.push_back(next() % 3 == 0);
    }
    double best = -1;
    for (size_t i = 0; i < n; ++i)
      if (query.relevant[i]) best = std::max(best, query.scores[i]);
    int64_t rank = 0;
    if (best >= 0) {
      rank = 1;
      for (size_t i = 0; i < n; ++i)
        rank += query.scores[i] > best || (query.scores[i] == best && !query.relevant[i]);
      reciprocal_sum += 1.0 / static_cast<double>(rank);
    }
    expected.push_back(rank);
    queries.push_back(std::move(query));
  }
  const RankingMetrics m = EvaluateRanking(queries, {1});
  EXPECT_EQ(m.first_relevant_rank, expected);
  EXPECT_NEAR(m.mrr, reciprocal_sum / static_cast<double>(m.queries), 1e-12);
}

TEST(Classification, CountsAndRatiosAtAThreshold) {
  const std::vector<double> scores = {0.9, 0.8, 0.6, 0.4, 0.3, 0.1};
  const std::vector<int> labels = {1, 0, 1, 1, 0, 0};
  const ClassificationMetrics m = Classify(scores, labels, 0.5);
  EXPECT_EQ(m.true_positives, 2);
  EXPECT_EQ(m.false_positives, 1);
  EXPECT_EQ(m.true_negatives, 2);
  EXPECT_EQ(m.false_negatives, 1);
  EXPECT_DOUBLE_EQ(m.accuracy, 4.0 / 6);
  EXPECT_DOUBLE_EQ(m.precision, 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.recall, 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.f1, 2.0 / 3);
  // Nothing predicted positive: precision and F1 are 0, not NaN.
  const ClassificationMetrics none = Classify(scores, labels, 2.0);
  EXPECT_DOUBLE_EQ(none.precision, 0.0);
  EXPECT_DOUBLE_EQ(none.f1, 0.0);
  EXPECT_DOUBLE_EQ(none.accuracy, 0.5);
}

TEST(Classification, ThresholdChosenOnValidationMaximisesTheObjective) {
  // Accuracy peaks between 0.4 and 0.3 (5 of 6 right); F1 too.
  const std::vector<double> scores = {0.9, 0.8, 0.6, 0.4, 0.3, 0.1};
  const std::vector<int> labels = {1, 1, 0, 1, 0, 0};
  const double t = ChooseThreshold(scores, labels);
  EXPECT_DOUBLE_EQ(t, 0.35);
  EXPECT_DOUBLE_EQ(Classify(scores, labels, t).accuracy, 5.0 / 6);
  // All positive: the best F1 threshold takes everything.
  EXPECT_LT(ChooseThreshold({0.2, 0.7}, {1, 1}, ThresholdObjective::kF1), 0.2);
  EXPECT_THROW(ChooseThreshold({}, {}), docmatch::Error);
}

TEST(Ranking, GradedNdcgPrecisionAtTenAndMrrAtTenByHand) {
  // 12 candidates, scores descending with the index. Relevant: index 1
  // (grade 2, rank 2), index 4 (grade 1, rank 5) and index 11 (grade 3,
  // rank 12, beyond the cut-offs).
  RankingQuery q;
  for (int i = 0; i < 12; ++i) q.scores.push_back(1.0 - 0.05 * i);
  q.relevant.assign(12, false);
  q.grades.assign(12, 0.0);
  for (auto [index, grade] : {std::pair{1, 2.0}, {4, 1.0}, {11, 3.0}}) {
    q.relevant[index] = true;
    q.grades[index] = grade;
  }
  // A second query whose only relevant candidate is at rank 11: MRR@10 0.
  RankingQuery late;
  for (int i = 0; i < 12; ++i) late.scores.push_back(1.0 - 0.05 * i);
  late.relevant.assign(12, false);
  late.relevant[10] = true;
  const RankingMetrics m = EvaluateRanking({q, late}, {1, 10, 100});
  // nDCG@10 of q: DCG 2 / log2(3) + 1 / log2(6); ideal 3 / log2(2) + 2 / log2(3) + 1 / log2(4).
  const double dcg = 2 / std::log2(3.0) + 1 / std::log2(6.0);
  const double ideal = 3 / std::log2(2.0) + 2 / std::log2(3.0) + 1 / std::log2(4.0);
  // late: nothing relevant in the top 10.
  EXPECT_NEAR(m.ndcg_at_10, (dcg / ideal + 0) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(m.p_at_10, (2.0 / 10 + 0) / 2);
  EXPECT_DOUBLE_EQ(m.mrr, (1.0 / 2 + 1.0 / 11) / 2);
  EXPECT_DOUBLE_EQ(m.mrr_at_10, (1.0 / 2 + 0) / 2);
  EXPECT_DOUBLE_EQ(m.recall.at(10), (2.0 / 3 + 0) / 2);
  EXPECT_DOUBLE_EQ(m.recall.at(100), 1.0);
  // Without grades every relevant candidate gains 1.
  q.grades.clear();
  const RankingMetrics ungraded = EvaluateRanking({q}, {10});
  EXPECT_NEAR(ungraded.ndcg_at_10, (1 / std::log2(3.0) + 1 / std::log2(6.0)) / (1 + 1 / std::log2(3.0) + 0.5), 1e-15);

  // Sums of two halves add up to the whole's means.
  const RankingMetrics first = EvaluateRanking({q}, {1, 10, 100}), second = EvaluateRanking({late}, {1, 10, 100});
  std::vector<double> sums = first.Sums();
  for (size_t i = 0; i < sums.size(); ++i) sums[i] += second.Sums()[i];
  const RankingMetrics both = RankingMetrics::FromSums(sums, {1, 10, 100});
  const RankingMetrics whole = EvaluateRanking({q, late}, {1, 10, 100});
  EXPECT_EQ(both.queries, 2);
  EXPECT_EQ(both.ToJson().dump(), whole.ToJson().dump());
  EXPECT_THROW(RankingMetrics::FromSums(sums, {1}), docmatch::Error);
}

TEST(Ranking, RelevantDocumentsPrepareSkippedCountAsNeverFound) {
  // 5 candidates, scores descending with the index; relevant: index 0 (grade
  // 1, rank 1) and index 3 (grade 2, rank 4), and one absent document of
  // grade 3 (prepare skipped it): three relevant, two found.
  RankingQuery q;
  for (int i = 0; i < 5; ++i) q.scores.push_back(1.0 - 0.1 * i);
  q.relevant = {true, false, false, true, false};
  q.grades = {1, 0, 0, 2, 0};
  q.absent = {3};
  // A query whose only relevant document is absent has no relevant candidate: skipped.
  RankingQuery unreachable;
  unreachable.scores = {0.5, 0.4};
  unreachable.relevant = {false, false};
  unreachable.absent = {1};
  const RankingMetrics m = EvaluateRanking({q, unreachable}, {1, 10});
  EXPECT_EQ(m.queries, 1);
  EXPECT_EQ(m.skipped, 1);
  EXPECT_DOUBLE_EQ(m.mrr, 1.0);
  EXPECT_DOUBLE_EQ(m.map, (1.0 / 1 + 2.0 / 4) / 3);  // precision at each found one, over all three
  EXPECT_DOUBLE_EQ(m.recall.at(10), 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.recall.at(1), 1.0 / 3);
  // The ideal ranking puts the absent grade-3 document first.
  const double dcg = 1 / std::log2(2.0) + 2 / std::log2(5.0);
  const double ideal = 3 / std::log2(2.0) + 2 / std::log2(3.0) + 1 / std::log2(4.0);
  EXPECT_NEAR(m.ndcg_at_10, dcg / ideal, 1e-15);
  EXPECT_DOUBLE_EQ(m.mpr, (0.0 / 4 + 3.0 / 4) / 2);  // over the two ranked
}

TEST(TrecRun, LinesCarryEveryDigitAndRefuseIdsWithWhitespace) {
  EXPECT_EQ(TrecRunLine("q1", "doc-7", 3, 0.1), "q1 Q0 doc-7 3 0.10000000000000001 docmatch\n");
  EXPECT_EQ(std::stod("0.10000000000000001"), 0.1);
  EXPECT_THROW(TrecRunLine("q 1", "doc-7", 1, 0.5), docmatch::Error);
  EXPECT_THROW(TrecRunLine("q1", "", 1, 0.5), docmatch::Error);
}

TEST(Bootstrap, PercentilesAsNumpyAndPairedDifferencesByHand) {
  // numpy.percentile([4, 1, 3, 2], 2.5) = 1.075; 97.5 -> 3.925; 50 -> 2.5.
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 2.5), 1.075, 1e-15);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 97.5), 3.925, 1e-15);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({7}, 2.5), 7);
  // Two rankings of three queries, three resamples given by their counts.
  const std::vector<std::vector<double>> scores = {{1, 0, 0.5}, {0, 0, 1}};
  const std::vector<std::vector<uint32_t>> counts = {{3, 0, 0}, {0, 1, 2}, {1, 1, 1}};
  const Resampler given = [&](int64_t draw, std::vector<uint32_t>* out) { *out = counts[draw]; };
  const PairedBootstrap b = Bootstrap(scores, 0, 3, given);
  // Resampled means: A 1, 1/3, 1/2; B 0, 2/3, 1/3; B - A -1, 1/3, -1/6.
  EXPECT_DOUBLE_EQ(b.rows[0].mean, 0.5);
  EXPECT_DOUBLE_EQ(b.rows[1].mean, 1.0 / 3);
  EXPECT_NEAR(b.rows[0].low, Percentile({1, 1.0 / 3, 0.5}, 2.5), 1e-15);
  EXPECT_NEAR(b.rows[1].high, Percentile({0, 2.0 / 3, 1.0 / 3}, 97.5), 1e-15);
  EXPECT_NEAR(b.minus_reference[1].mean, 1.0 / 3 - 0.5, 1e-15);
  EXPECT_NEAR(b.minus_reference[1].low, Percentile({-1, 1.0 / 3, -1.0 / 6}, 2.5), 1e-15);
  EXPECT_NEAR(b.minus_reference[1].high, Percentile({-1, 1.0 / 3, -1.0 / 6}, 97.5), 1e-15);
  EXPECT_DOUBLE_EQ(b.minus_reference[1].share_above_zero, 1.0 / 3);
  EXPECT_DOUBLE_EQ(b.minus_reference[0].low, 0);  // the reference minus itself
  EXPECT_THROW(Bootstrap({{1, 2}, {1}}, 0, 1, SeededResampler(2, 1)), docmatch::Error);
  EXPECT_THROW(Bootstrap(scores, 0, 0, given), docmatch::Error);
}

TEST(Bootstrap, ResamplesDrawEveryQueryCountAndRepeatWithTheSeed) {
  const auto draws = [](uint64_t seed) {
    const Resampler draw = SeededResampler(50, seed);
    std::vector<std::vector<uint32_t>> all(200);
    for (int64_t b = 0; b < 200; ++b) draw(b, &all[b]);
    return all;
  };
  const auto a = draws(7), again = draws(7), other = draws(8);
  ASSERT_EQ(a.size(), 200u);
  double drawn = 0;
  for (const auto& draw : a) {
    uint32_t sum = 0;
    for (uint32_t c : draw) sum += c;
    EXPECT_EQ(sum, 50u);
    drawn += draw[0];
  }
  EXPECT_NEAR(drawn / 200, 1.0, 0.25);  // each query is drawn once a resample on average
  EXPECT_EQ(a, again);
  EXPECT_NE(a, other);
}

}  // namespace
}  // namespace docmatch::eval
