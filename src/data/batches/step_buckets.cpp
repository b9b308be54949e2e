// The step's buckets: the ladder, the counts, the bucket and the padded grid
// (step_buckets.h).
#include "data/batches/step_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "console/error.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {

int64_t RoundUpToBucket(int64_t n, const StepBuckets& buckets) {
  const int64_t g = buckets.granularity;
  DOCMATCH_CHECK(n <= std::numeric_limits<int32_t>::max(), "data", "a step of ", n, " rows is too large to index");
  DOCMATCH_CHECK(g > 0 && buckets.ratio > 1.0, "data", "step buckets need a positive granularity and a ratio above 1, ",
                 "not ", g, " and ", buckets.ratio);
  int64_t size = g;
  while (size < n) {
    const auto grown = static_cast<int64_t>(std::ceil(static_cast<double>(size) * buckets.ratio / g)) * g;
    size = std::max(size + g, grown);
  }
  return size;
}

StepCounts CountStep(const BlockBatch& batch) {
  StepCounts counts;
  for (int64_t block = 0; block < batch.B * batch.S; ++block) {
    if (!batch.block_mask[block]) continue;
    ++counts.R;
    for (int64_t t = 0; t < batch.T; ++t) {
      const int64_t at = block * batch.T + t;
      if (t != 0 && batch.tokens[at] == kPadId) continue;
      ++counts.N;
      counts.M += batch.lm_labels[at] != kIgnoreLabel;
    }
  }
  for (const int64_t block : batch.masked_blocks) counts.P += block >= 0;
  return counts;
}

StepShape BucketFor(const StepCounts& counts, int64_t B, int64_t K, const BlockOptions& blocks,
                    const StepBuckets& buckets) {
  StepShape shape;
  shape.S = blocks.max_blocks;
  shape.T = blocks.block_length;
  shape.P = B * K;
  DOCMATCH_CHECK(counts.P <= shape.P, "data", counts.P, " masked blocks in a batch of ", B, " x ", K, " slots");
  // At least one filler block, and as many as the filler tokens need.
  // R only grows, and a filler block holds up to T >= 2 tokens, so this
  // settles in a few rounds; the bound only stops a misuse (T = 1).
  shape.R = RoundUpToBucket(counts.R + 1, buckets);
  for (int round = 0;; ++round) {
    shape.N = RoundUpToBucket(counts.N + (shape.R - counts.R), buckets);
    const int64_t needed = (shape.N - counts.N + shape.T - 1) / shape.T;
    if (needed <= shape.R - counts.R) break;
    DOCMATCH_CHECK(round < 64, "data", "no step bucket holds blocks of ", shape.T, " tokens");
    shape.R = RoundUpToBucket(counts.R + needed, buckets);
  }
  shape.M = RoundUpToBucket(counts.M + 1, buckets);
  return shape;
}

BlockBatch PadGrid(const BlockBatch& batch, int64_t S, int64_t T) {
  DOCMATCH_CHECK(S >= batch.S && T >= batch.T, "data", "a batch of ", batch.S, " blocks of ", batch.T,
                 " tokens does not fit a ", S, " x ", T, " grid");
  BlockBatch out = batch;
  out.S = S;
  out.T = T;
  out.tokens.assign(batch.B * S * T, kPadId);
  out.lm_labels.assign(batch.B * S * T, kIgnoreLabel);
  out.block_mask.assign(batch.B * S, 0);
  for (int64_t b = 0; b < batch.B; ++b) {
    for (int64_t s = 0; s < batch.S; ++s) {
      out.block_mask[b * S + s] = batch.block_mask[b * batch.S + s];
      std::copy_n(batch.tokens.begin() + (b * batch.S + s) * batch.T, batch.T, out.tokens.begin() + (b * S + s) * T);
      std::copy_n(batch.lm_labels.begin() + (b * batch.S + s) * batch.T, batch.T,
                  out.lm_labels.begin() + (b * S + s) * T);
    }
  }
  return out;  // masked_blocks hold block positions within a document: unchanged
}

}  // namespace docmatch::data
