// Paired bootstrap intervals (bootstrap.h).
#include "eval/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "console/error.h"

namespace docmatch::eval {
namespace {

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

Interval Spread(double mean, const std::vector<double>& resampled) {
  const auto above = std::count_if(resampled.begin(), resampled.end(), [](double v) { return v > 0; });
  return {mean, Percentile(resampled, 2.5), Percentile(resampled, 97.5),
          static_cast<double>(above) / static_cast<double>(resampled.size())};
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  DOCMATCH_CHECK(!values.empty(), "eval", "a percentile of no values");
  std::sort(values.begin(), values.end());
  const double position = p / 100 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - static_cast<double>(below)) * (values[above] - values[below]);
}

Resampler SeededResampler(int64_t queries, uint64_t seed) {
  auto random = std::make_shared<std::mt19937_64>(seed);
  return [random, queries](int64_t, std::vector<uint32_t>* counts) {
    std::uniform_int_distribution<int64_t> pick(0, queries - 1);
    counts->assign(queries, 0);
    for (int64_t i = 0; i < queries; ++i) ++(*counts)[pick(*random)];
  };
}

PairedBootstrap Bootstrap(const std::vector<std::vector<double>>& scores, size_t reference, int64_t resamples,
                          const Resampler& draw) {
  DOCMATCH_CHECK(reference < scores.size(), "eval", "bootstrap reference ", reference, " of ", scores.size(), " rows");
  DOCMATCH_CHECK(resamples >= 1, "eval", "a bootstrap of ", resamples, " resamples");
  const size_t Q = scores[reference].size();
  DOCMATCH_CHECK(Q > 0, "eval", "a bootstrap of no queries");
  for (const auto& row : scores) DOCMATCH_CHECK(row.size() == Q, "eval", "bootstrap rows of unequal length");
  std::vector<std::vector<double>> means(scores.size(), std::vector<double>(resamples));  // (rows, resamples)
  std::vector<uint32_t> counts;
  for (int64_t b = 0; b < resamples; ++b) {
    draw(b, &counts);
    DOCMATCH_CHECK(counts.size() == Q, "eval", "a resample of ", counts.size(), " queries for ", Q);
    for (size_t r = 0; r < scores.size(); ++r) {
      double sum = 0;
      for (size_t q = 0; q < Q; ++q) sum += counts[q] * scores[r][q];
      means[r][b] = sum / static_cast<double>(Q);
    }
  }
  PairedBootstrap out;
  const double reference_mean = Mean(scores[reference]);
  std::vector<double> difference(resamples);
  for (size_t r = 0; r < scores.size(); ++r) {
    for (int64_t b = 0; b < resamples; ++b) difference[b] = means[r][b] - means[reference][b];
    const double mean = Mean(scores[r]);
    out.rows.push_back(Spread(mean, means[r]));
    out.minus_reference.push_back(Spread(mean - reference_mean, difference));
  }
  return out;
}

}  // namespace docmatch::eval
