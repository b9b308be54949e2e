// The training step's buckets (data/batches/step_buckets.h): the ladder by
// hand, the bucket's room for every real entry, its determinism, and the
// padded grid.
#include "data/batches/step_buckets.h"

#include <gtest/gtest.h>

#include <random>

#include "console/error.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

TEST(StepBuckets, LadderStepsByGranularityThenByRatio) {
  const StepBuckets buckets{/*granularity=*/64, /*ratio=*/1.125};
  // 64 ... 576 by 64 (64 x 1.125 rounds up to the next 64), then
  // 576 x 1.125 = 648 -> 704, 704 x 1.125 = 792 -> 832, 832 x 1.125 = 936 -> 960.
  const std::vector<int64_t> ladder = {64, 128, 192, 256, 320, 384, 448, 512, 576, 704, 832, 960};
  for (size_t i = 0; i < ladder.size(); ++i) {
    EXPECT_EQ(RoundUpToBucket(ladder[i], buckets), ladder[i]);
    EXPECT_EQ(RoundUpToBucket(ladder[i] - 1, buckets), ladder[i]);
    if (i > 0) EXPECT_EQ(RoundUpToBucket(ladder[i - 1] + 1, buckets), ladder[i]);
  }
  EXPECT_EQ(RoundUpToBucket(0, buckets), 64);
  EXPECT_THROW(RoundUpToBucket(5, StepBuckets{64, 1.0}), Error);
  // Never more than one granule or the ratio's share of filler.
  for (int64_t n = 1; n < 20000; n += 7) {
    const int64_t size = RoundUpToBucket(n, buckets);
    EXPECT_GE(size, n);
    EXPECT_EQ(size % 64, 0);
    EXPECT_LE(size, std::max<int64_t>(n + 63, static_cast<int64_t>(n * 1.125) + 128)) << n;
  }
}

TEST(StepBuckets, EveryRealEntryKeepsItsPlaceAndTheSameCountsGiveTheSameShape) {
  std::mt19937_64 random(5);
  const BlockOptions blocks{/*block_length=*/32, /*max_blocks=*/48, /*separator=*/true};
  const StepBuckets buckets;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t B = 1 + static_cast<int64_t>(random() % 64), K = static_cast<int64_t>(random() % 3);
    StepCounts c;
    c.R = B + static_cast<int64_t>(random() % static_cast<uint64_t>(B * 47 + 1));
    c.N = c.R + static_cast<int64_t>(random() % static_cast<uint64_t>(c.R * 31 + 1));
    c.M = static_cast<int64_t>(random() % static_cast<uint64_t>(c.N / 4 + 1));
    c.P = static_cast<int64_t>(random() % static_cast<uint64_t>(B * K + 1));
    const StepShape s = BucketFor(c, B, K, blocks, buckets);
    ASSERT_EQ(s.S, 48);
    ASSERT_EQ(s.T, 32);
    ASSERT_EQ(s.P, B * K);
    ASSERT_GT(s.R, c.R);                                    // a filler block at least
    ASSERT_GE(s.N - c.N, s.R - c.R);                         // each filler block a token at least
    ASSERT_LE(s.N - c.N, (s.R - c.R) * s.T);                 // and at most T
    ASSERT_GT(s.M, c.M);
    ASSERT_EQ(s.R, RoundUpToBucket(s.R, buckets));           // on the ladder
    ASSERT_EQ(s.N, RoundUpToBucket(s.N, buckets));
    ASSERT_TRUE(BucketFor(c, B, K, blocks, buckets) == s);  // deterministic
  }
  StepCounts too_many;
  too_many.P = 7;
  EXPECT_THROW(BucketFor(too_many, 3, 2, blocks, buckets), Error);
}

TEST(StepBuckets, PaddedGridKeepsEveryBlockTokenLabelAndMask) {
  // 2 documents, 2 blocks of 3: document 0 has blocks [1 5 6] and [1 7 0],
  // document 1 one block [1 8 9] (its second is padding).
  BlockBatch batch;
  batch.B = 2;
  batch.S = 2;
  batch.T = 3;
  batch.tokens = {1, 5, 6, 1, 7, kPadId, 1, 8, 9, kPadId, kPadId, kPadId};
  batch.lm_labels.assign(12, kIgnoreLabel);
  batch.lm_labels[2] = 40;
  batch.lm_labels[7] = 41;
  batch.block_mask = {1, 1, 1, 0};
  batch.K = 1;
  batch.masked_blocks = {1, 0};
  const StepCounts counts = CountStep(batch);
  EXPECT_EQ(counts.R, 3);
  EXPECT_EQ(counts.N, 8);
  EXPECT_EQ(counts.M, 2);
  EXPECT_EQ(counts.P, 2);
  const BlockBatch padded = PadGrid(batch, 3, 4);
  ASSERT_EQ(padded.tokens.size(), 2u * 3 * 4);
  const std::vector<int32_t> tokens = {1, 5, 6, kPadId, 1, 7, kPadId, kPadId, kPadId, kPadId, kPadId, kPadId,
                                       1, 8, 9, kPadId, kPadId, kPadId, kPadId, kPadId, kPadId, kPadId, kPadId, kPadId};
  EXPECT_EQ(padded.tokens, tokens);
  EXPECT_EQ(padded.block_mask, (std::vector<uint8_t>{1, 1, 0, 1, 0, 0}));
  EXPECT_EQ(padded.lm_labels[2], 40);
  EXPECT_EQ(padded.lm_labels[12 + 1], 41);
  EXPECT_EQ(padded.masked_blocks, batch.masked_blocks);
  const StepCounts after = CountStep(padded);
  EXPECT_EQ(after.R, counts.R);
  EXPECT_EQ(after.N, counts.N);
  EXPECT_EQ(after.M, counts.M);
  EXPECT_THROW(PadGrid(batch, 1, 4), Error);
}

}  // namespace
}  // namespace docmatch::data
