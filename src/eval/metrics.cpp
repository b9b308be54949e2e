// The metric definitions of metrics.h, ties and empty lists handled as they
// document.
#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>

#include "console/error.h"

namespace docmatch::eval {

nlohmann::json ClassificationMetrics::ToJson() const {
  return {{"threshold", threshold},
          {"accuracy", accuracy},
          {"precision", precision},
          {"recall", recall},
          {"f1", f1},
          {"true_positives", true_positives},
          {"false_positives", false_positives},
          {"true_negatives", true_negatives},
          {"false_negatives", false_negatives}};
}

ClassificationMetrics Classify(const std::vector<double>& scores, const std::vector<int>& labels, double threshold) {
  if (scores.size() != labels.size()) throw Error("eval", "scores and labels differ in length");
  ClassificationMetrics m;
  m.threshold = threshold;
  for (size_t i = 0; i < scores.size(); ++i) {
    const bool predicted = scores[i] >= threshold, actual = labels[i] == 1;
    m.true_positives += predicted && actual;
    m.false_positives += predicted && !actual;
    m.true_negatives += !predicted && !actual;
    m.false_negatives += !predicted && actual;
  }
  const double n = static_cast<double>(scores.size());
  const double tp = static_cast<double>(m.true_positives);
  m.accuracy = n > 0 ? (m.true_positives + m.true_negatives) / n : 0.0;
  m.precision = m.true_positives + m.false_positives > 0 ? tp / (m.true_positives + m.false_positives) : 0.0;
  m.recall = m.true_positives + m.false_negatives > 0 ? tp / (m.true_positives + m.false_negatives) : 0.0;
  m.f1 = m.precision + m.recall > 0 ? 2 * m.precision * m.recall / (m.precision + m.recall) : 0.0;
  return m;
}

double ChooseThreshold(const std::vector<double>& scores, const std::vector<int>& labels,
                       ThresholdObjective objective) {
  if (scores.empty()) throw Error("eval", "no validation pairs to choose a threshold on");
  std::vector<double> distinct = scores;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  // Candidates: below everything, between neighbours, above everything.
  std::vector<double> candidates = {distinct.front() - 1.0};
  for (size_t i = 1; i < distinct.size(); ++i) candidates.push_back((distinct[i - 1] + distinct[i]) / 2);
  candidates.push_back(distinct.back() + 1.0);
  double best = candidates.front(), best_value = -1;
  for (double t : candidates) {
    const ClassificationMetrics m = Classify(scores, labels, t);
    const double value = objective == ThresholdObjective::kAccuracy ? m.accuracy : m.f1;
    if (value > best_value) {
      best_value = value;
      best = t;
    }
  }
  return best;
}

nlohmann::json RankingMetrics::ToJson() const {
  nlohmann::json out = {{"queries", queries}, {"skipped_queries", skipped}, {"p@1", p_at_1}, {"p@10", p_at_10},
                        {"mrr", mrr},         {"mrr@10", mrr_at_10},        {"map", map},    {"ndcg@10", ndcg_at_10},
                        {"mpr", mpr},         {"mpr_percentile", 1.0 - mpr}};
  for (const auto& [k, v] : recall) out["recall@" + std::to_string(k)] = v;
  return out;
}

std::vector<double> RankingMetrics::Sums() const {
  const double n = static_cast<double>(queries);
  std::vector<double> sums = {n, static_cast<double>(skipped)};
  for (double RankingMetrics::*mean : kRankingMeans) sums.push_back(this->*mean * n);
  for (const auto& [k, v] : recall) sums.push_back(v * n);
  return sums;
}

RankingMetrics RankingMetrics::FromSums(const std::vector<double>& sums, const std::vector<int>& ks) {
  constexpr size_t kCounts = 2, kFirstRecall = kCounts + std::size(kRankingMeans);
  DOCMATCH_CHECK(sums.size() == kFirstRecall + ks.size(), "eval", "ranking sums of ", sums.size(), " values for ",
                 ks.size(), " cut-offs");
  RankingMetrics m;
  m.queries = static_cast<int64_t>(sums[0]);
  m.skipped = static_cast<int64_t>(sums[1]);
  const double n = std::max(1.0, sums[0]);
  for (size_t i = 0; i < std::size(kRankingMeans); ++i) m.*kRankingMeans[i] = sums[kCounts + i] / n;
  for (size_t k = 0; k < ks.size(); ++k) m.recall[ks[k]] = sums[kFirstRecall + k] / n;
  return m;
}

RankingMetrics EvaluateRanking(const std::vector<RankingQuery>& queries, const std::vector<int>& ks) {
  RankingMetrics m;
  for (int k : ks) m.recall[k] = 0;
  for (const RankingQuery& q : queries) {
    if (q.scores.size() != q.relevant.size() || (!q.grades.empty() && q.grades.size() != q.scores.size())) {
      throw Error("eval", "a query's scores and labels differ");
    }
    const auto grade = [&q](size_t i) { return q.grades.empty() ? 1.0 : q.grades[i]; };
    const int64_t candidates_relevant = std::count(q.relevant.begin(), q.relevant.end(), true);
    const int64_t relevant_count = candidates_relevant + static_cast<int64_t>(q.absent.size());
    if (candidates_relevant == 0) {
      ++m.skipped;
      m.first_relevant_rank.push_back(0);
      continue;
    }
    ++m.queries;
    // Order: score descending; among equal scores, irrelevant first (pessimistic).
    std::vector<size_t> order(q.scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (q.scores[a] != q.scores[b]) return q.scores[a] > q.scores[b];
      return !q.relevant[a] && q.relevant[b];
    });
    const double N = static_cast<double>(order.size());
    double first = 0, precision_sum = 0, percentile_sum = 0, dcg = 0;
    int64_t found = 0, in_top_10 = 0;
    std::map<int, int64_t> in_top;
    std::vector<double> gains;
    for (size_t position = 0; position < order.size(); ++position) {
      if (!q.relevant[order[position]]) continue;
      const double rank = static_cast<double>(position + 1);
      ++found;
      if (first == 0) first = rank;
      precision_sum += found / rank;
      percentile_sum += N > 1 ? (rank - 1) / (N - 1) : 0.0;
      for (int k : ks) in_top[k] += rank <= k;
      in_top_10 += rank <= 10;
      if (rank <= 10) dcg += grade(order[position]) / std::log2(rank + 1);
      gains.push_back(grade(order[position]));
    }
    gains.insert(gains.end(), q.absent.begin(), q.absent.end());
    std::sort(gains.rbegin(), gains.rend());
    double ideal = 0;
    for (size_t i = 0; i < gains.size() && i < 10; ++i) ideal += gains[i] / std::log2(static_cast<double>(i) + 2);
    m.first_relevant_rank.push_back(static_cast<int64_t>(first));
    m.p_at_1 += first == 1 ? 1.0 : 0.0;
    m.p_at_10 += static_cast<double>(in_top_10) / 10;
    m.mrr += 1.0 / first;
    m.mrr_at_10 += first <= 10 ? 1.0 / first : 0.0;
    m.map += precision_sum / relevant_count;
    m.ndcg_at_10 += ideal > 0 ? dcg / ideal : 0.0;
    m.mpr += percentile_sum / static_cast<double>(found);  // of the relevant documents ranked
    for (int k : ks) m.recall[k] += static_cast<double>(in_top[k]) / relevant_count;
  }
  if (m.queries > 0) {
    const double n = static_cast<double>(m.queries);
    for (double RankingMetrics::*mean : kRankingMeans) m.*mean /= n;
    for (auto& [k, v] : m.recall) v /= n;
  }
  return m;
}

size_t FirstBest(const std::vector<double>& values) {
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = i;
  return best;
}

int64_t QueriesPerBlock(int64_t N, int64_t matrices) {
  return std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, N * std::max<int64_t>(1, matrices)));
}

std::string TrecRunLine(const std::string& query, const std::string& document, int64_t rank, double score) {
  for (const std::string* id : {&query, &document}) {
    if (id->empty() || id->find_first_of(" \t\r\n") != std::string::npos) {
      throw Error("eval", "the id \"" + *id + "\" is empty or holds whitespace: a TREC run line cannot carry it");
    }
  }
  char text[64];
  std::snprintf(text, sizeof(text), " %lld %.17g docmatch\n", static_cast<long long>(rank), score);
  return query + " Q0 " + document + text;
}

}  // namespace docmatch::eval
