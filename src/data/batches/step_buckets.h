// Fixed shapes for SMITH's training step, so that a captured step (a CUDA
// graph, replayed) can take every batch: a batch's grid (S blocks of T
// tokens) is padded to the model's maxima, and its real blocks R, real
// tokens N and predicted words M are rounded up to sizes on a geometric
// ladder, filled with inert entries that the model leaves out of every
// output and loss (model/smith.h, ToTensors with a StepShape). The masked
// blocks P are padded to their most, B x K. Plain arithmetic, no torch.
#pragma once

#include <cstdint>

#include "data/batches/blocks.h"

namespace docmatch::data {

struct StepBuckets {
  int64_t granularity = 64;  // every size a multiple of it
  double ratio = 1.125;      // the next size: about ratio times, rounded up to the granularity
};

// The smallest ladder size >= n: the ladder is g, then each next size the
// larger of (previous + g) and (previous x ratio) rounded up to a multiple of g.
int64_t RoundUpToBucket(int64_t n, const StepBuckets& buckets);

struct StepShape {
  int64_t S = 0, T = 0;         // the grid: blocks per document, tokens per block
  int64_t R = 0, N = 0, M = 0;  // real blocks, real tokens, predicted words, fillers included
  int64_t P = 0;                // masked blocks, fillers included
  bool operator==(const StepShape& o) const {
    return S == o.S && T == o.T && R == o.R && N == o.N && M == o.M && P == o.P;
  }
};

// What a batch holds, counted as model/smith.h's layout counts it: blocks
// with block_mask set, their tokens at position 0 and wherever not kPadId,
// the labelled tokens among those, and the masked blocks.
struct StepCounts {
  int64_t R = 0, N = 0, M = 0, P = 0;
};
StepCounts CountStep(const BlockBatch& batch);

// The bucket of a batch of `counts` for a model of `blocks`: S and T the
// model's maxima, P = B x K, and R, N, M on the ladder with at least one
// filler block, and room for the fillers: every filler block holds 1 to T
// filler tokens (R - counts.R <= N - counts.N <= (R - counts.R) T), so every
// real entry keeps its place. Deterministic: the same counts give the same shape.
StepShape BucketFor(const StepCounts& counts, int64_t B, int64_t K, const BlockOptions& blocks,
                    const StepBuckets& buckets);

// `batch` with its grid padded to S x T (padding blocks and tokens; the real
// ones keep their content, masks and labels). S and T at least the batch's.
BlockBatch PadGrid(const BlockBatch& batch, int64_t S, int64_t T);

}  // namespace docmatch::data
