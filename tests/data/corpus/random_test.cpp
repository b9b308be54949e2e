// Counter-based randomness (data/corpus/random.h).
#include "data/corpus/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace docmatch::data {
namespace {

TEST(KeyedRandom, IsAPureFunctionOfItsKeys) {
  KeyedRandom a(42, {1, 2}), b(42, {1, 2}), c(42, {2, 1}), d(43, {1, 2});
  const uint64_t first = a.Next();
  EXPECT_EQ(first, b.Next());
  EXPECT_NE(first, c.Next());  // key order matters
  EXPECT_NE(first, d.Next());  // so does the seed
}

TEST(KeyedRandom, BelowIsUniform) {
  // Chi-square with 9 degrees of freedom; 27.88 is the 0.999 quantile.
  KeyedRandom random(1, {});
  constexpr int kBins = 10, kDraws = 100000;
  std::vector<int> counts(kBins, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[random.Below(kBins)];
  double chi2 = 0;
  for (int c : counts) chi2 += (c - kDraws / kBins) * (c - kDraws / kBins) / double(kDraws / kBins);
  EXPECT_LT(chi2, 27.88);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(random.Below(3), 3u);
  EXPECT_EQ(random.Below(1), 0u);
}

TEST(KeyedRandom, ShuffleIsAPermutationThatMoves) {
  std::vector<int> values(1000);
  std::iota(values.begin(), values.end(), 0);
  KeyedRandom random(9, {3});
  std::vector<int> shuffled = values;
  random.Shuffle(&shuffled);
  EXPECT_NE(shuffled, values);
  std::sort(shuffled.begin(), shuffled.end());
  EXPECT_EQ(shuffled, values);
}

}  // namespace
}  // namespace docmatch::data
