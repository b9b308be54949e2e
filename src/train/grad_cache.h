// Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch
// Size under Memory Limited Setup"; sentence-transformers' version is
// CachedMultipleNegativesRankingLoss): a contrastive objective over a batch
// far larger than one forward pass with a graph can hold.
//
//  1. Each chunk of the batch runs forward, its graph dropped as soon as it
//     ends (outputs detached: one chunk's activations alive at a time, as
//     without a graph, but with the kernels and dropout draws the re-run will
//     make); its outputs (the vectors: a few KB per document) are kept, and
//     so is the random state its dropout drew from.
//  2. The objective runs once over every chunk's outputs, as leaf copies,
//     cross-rank gathers included; autograd gives its gradient with respect
//     to each output. That is the whole global batch's loss.
//  3. Backward() re-runs each chunk with a graph, under the same random state
//     and autocast as its first pass, and back-propagates the cached
//     gradients into the parameters. One chunk's graph lives at a time.
//
// The parameters' gradients are the plain objective's over the same outputs,
// up to float summation order. Dropout differs from one pass over the whole
// batch only in which draws each position gets (each chunk draws its own);
// the re-run reproduces each chunk's first pass exactly. Memory: one chunk's
// activations plus all outputs; time: one extra forward per chunk.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "train/objectives.h"

namespace docmatch::train {

// What one chunk's forward gives the objective.
struct ChunkOutputs {
  std::vector<torch::Tensor> rows;  // concatenated over chunks along dim 0 (vectors; ids ride along)
  std::vector<torch::Tensor> sums;  // scalars added over chunks (a summed LM loss)
  std::vector<int64_t> counts;      // added over chunks (the LM's predicted tokens)
};

// `forward(i)` runs chunk i (of `chunks`) and must give outputs of the same
// shape both times it is called; `objective` takes the outputs of all chunks
// (rows concatenated, sums and counts added) and returns the objective as its
// plain form would over the whole batch. Returns that objective with its loss
// detached and `backward` set (see Backward in objectives.h). With grad mode
// off (validation) it runs the chunks and the objective, nothing more.
Objective CachedObjective(int64_t chunks, const std::function<ChunkOutputs(int64_t)>& forward,
                          const std::function<Objective(const ChunkOutputs&)>& objective, const torch::Device& device);

// Contrastive fine-tuning (objectives.h, Contrastive) over a rank's pairs in
// `chunks` parts, `embed(i)` giving part i's vectors and ids: one part is the
// plain objective, more are cached as above. A learned temperature rides
// along as the last part's one "sum" (the others give 0), so its cached
// gradient reaches the parameter in the last pass, the one that syncs.
Objective ChunkedContrastive(int64_t chunks, std::function<ContrastivePairs(int64_t)> embed,
                             const model::Temperature& temperature, dist::ProcessGroup& group,
                             const RelatedPairs* related = nullptr);

// A pair objective over all of a batch's pairs at a temperature: Contrastive
// or MultiPositiveContrastive with its group and relation bound.
using PairObjective = std::function<Objective(const ContrastivePairs&, const model::Temperature&)>;
// ChunkedContrastive for any pair objective (on `device`).
Objective ChunkedPairObjective(int64_t chunks, std::function<ContrastivePairs(int64_t)> embed,
                               const model::Temperature& temperature, const PairObjective& objective,
                               const torch::Device& device);

}  // namespace docmatch::train
