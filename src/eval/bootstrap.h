// Paired bootstrap intervals for per-query scores (a reciprocal rank a query
// for each of several rankings of the same queries): the method of
// scripts/compare-rankings.py. Every resample draws the queries with
// replacement once, and every ranking is averaged over that same draw, so a
// difference between two rankings keeps the queries' pairing. Intervals are
// the 2.5th and 97.5th percentiles of the resampled means, interpolated
// linearly between order statistics (numpy's default).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace docmatch::eval {

struct Interval {
  double mean = 0, low = 0, high = 0;
  double share_above_zero = 0;  // of the resampled means (differences: how often this ranking led)
};

struct PairedBootstrap {
  std::vector<Interval> rows;             // each ranking's mean and interval
  std::vector<Interval> minus_reference;  // each ranking minus the reference, resample by resample
};

// Fills `counts` (one entry a query, summing to the query count) with how
// often resample `b` draws each query; called for b = 0, 1, ... in order.
using Resampler = std::function<void(int64_t b, std::vector<uint32_t>* counts)>;

// `scores[r][q]`: ranking r's score of query q (every row as long), over
// `resamples` >= 1 draws. Memory: one count a query, and one mean a ranking
// and resample.
PairedBootstrap Bootstrap(const std::vector<std::vector<double>>& scores, size_t reference, int64_t resamples,
                          const Resampler& draw);

// Draws of `queries` queries with replacement from `seed`: the same seed
// gives the same draws.
Resampler SeededResampler(int64_t queries, uint64_t seed);

// The p-th percentile (0-100) of `values`, linear between order statistics.
double Percentile(std::vector<double> values, double p);

}  // namespace docmatch::eval
