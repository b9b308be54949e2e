// MeasureBlockPool, the masked sentence-block task's target diagnostics,
// against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "train/objectives.h"

namespace docmatch::train {
namespace {

TEST(BlockPool, SpreadOfIdenticalOrthogonalAndHandWorkedRows) {
  // Four copies of one vector: cosine 1, one singular value, rank 1.
  const BlockPoolSpread same = MeasureBlockPool(torch::ones({4, 8}));
  EXPECT_NEAR(same.mean_cosine, 1.0, 1e-12);
  EXPECT_NEAR(same.effective_rank, 1.0, 1e-9);
  // Four orthonormal rows: cosine 0, four equal singular values, rank 4.
  const BlockPoolSpread orthogonal = MeasureBlockPool(torch::eye(8).slice(0, 0, 4) * 3);
  EXPECT_NEAR(orthogonal.mean_cosine, 0.0, 1e-12);
  EXPECT_NEAR(orthogonal.effective_rank, 4.0, 1e-9);
  // Rows (1, 0) and (1, 1)/sqrt(2): cosine 1/sqrt(2). Singular values of
  // [[1, 0], [a, a]] with a = 1/sqrt(2): the Gram matrix [[1, a], [a, 1]] has
  // eigenvalues 1 +- a, so s = sqrt(1 + a), sqrt(1 - a).
  const double a = 1 / std::sqrt(2.0);
  const BlockPoolSpread two = MeasureBlockPool(torch::tensor({1.0, 0.0, a, a}, torch::kFloat64).view({2, 2}));
  EXPECT_NEAR(two.mean_cosine, a, 1e-12);
  const double s1 = std::sqrt(1 + a), s2 = std::sqrt(1 - a);
  const double p1 = s1 / (s1 + s2), p2 = s2 / (s1 + s2);
  EXPECT_NEAR(two.effective_rank, std::exp(-(p1 * std::log(p1) + p2 * std::log(p2))), 1e-9);
  // Fewer than two rows: nothing to compare.
  EXPECT_EQ(MeasureBlockPool(torch::ones({1, 8})).mean_cosine, 0.0);
}

}  // namespace
}  // namespace docmatch::train
