// The metric definitions of metrics.h, ties and empty lists handled as they
// document.
#include "eval/metrics.h"

#include <algorithm>
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
  nlohmann::json hr = nlohmann::json::object();
  for (const auto& [k, v] : hit_ratio) hr["hr@" + std::to_string(k)] = v;
  nlohmann::json out = {{"queries", queries}, {"skipped_queries", skipped}, {"p@1", p_at_1}, {"mrr", mrr}, {"map", map},
                        {"mpr", mpr},         {"mpr_percentile", 1.0 - mpr}};
  out.update(hr);
  return out;
}

RankingMetrics EvaluateRanking(const std::vector<RankingQuery>& queries, const std::vector<int>& ks) {
  RankingMetrics m;
  for (int k : ks) m.hit_ratio[k] = 0;
  for (const RankingQuery& q : queries) {
    if (q.scores.size() != q.relevant.size()) throw Error("eval", "a query's scores and labels differ");
    const int64_t relevant_count = std::count(q.relevant.begin(), q.relevant.end(), true);
    if (relevant_count == 0) {
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
    double first = 0, precision_sum = 0, percentile_sum = 0;
    int64_t found = 0;
    std::map<int, int64_t> in_top;
    for (size_t position = 0; position < order.size(); ++position) {
      if (!q.relevant[order[position]]) continue;
      const double rank = static_cast<double>(position + 1);
      ++found;
      if (first == 0) first = rank;
      precision_sum += found / rank;
      percentile_sum += N > 1 ? (rank - 1) / (N - 1) : 0.0;
      for (int k : ks) in_top[k] += rank <= k;
    }
    m.first_relevant_rank.push_back(static_cast<int64_t>(first));
    m.p_at_1 += first == 1 ? 1.0 : 0.0;
    m.mrr += 1.0 / first;
    m.map += precision_sum / relevant_count;
    m.mpr += percentile_sum / relevant_count;
    for (int k : ks) m.hit_ratio[k] += static_cast<double>(in_top[k]) / relevant_count;
  }
  if (m.queries > 0) {
    const double n = static_cast<double>(m.queries);
    m.p_at_1 /= n;
    m.mrr /= n;
    m.map /= n;
    m.mpr /= n;
    for (auto& [k, v] : m.hit_ratio) v /= n;
  }
  return m;
}

}  // namespace docmatch::eval
