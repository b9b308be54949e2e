// What fine-tuning draws and batches, apart from the stage that runs it
// (finetune.cpp), so that tests reach it: each epoch's order of the pairs,
// the labelled and mined negatives of each source and their draws, and the
// host batches of a micro-step (read and batched on any thread, embedded on
// the device). Every draw is a pure function of (seed, epoch, pair), so a
// pair's documents are the same on whichever rank it lands and however often
// it is built (the loader thread, gradient caching's re-run).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "data/batches/pairs.h"
#include "data/corpus/corpus.h"
#include "data/corpus/random.h"
#include "model/document_model.h"
#include "train/objectives.h"

namespace docmatch::train {

// The epoch's order of `pairs` pairs: the same permutation on every rank.
std::vector<int64_t> EpochOrder(size_t pairs, uint64_t seed, int64_t epoch);

// The related pairs (label 1) of `pairs`, in order.
std::vector<data::LabelledPair> Related(const std::vector<data::LabelledPair>& pairs);

// Pairs [begin, end) of `pairs` taken in `order`, read and batched on the
// host (any thread): the sources' batch, the targets', the labels.
struct PreparedPairs {
  std::shared_ptr<const model::DocumentModel::HostBatch> sources, targets;
  std::vector<float> labels;
  std::vector<int64_t> documents;  // corpus indices, source and target of each pair
  int64_t tokens = 0;              // the tokens the model reads of them
};
PreparedPairs PreparePairs(const model::DocumentModel& model, const data::Corpus& corpus,
                           const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order,
                           int64_t begin, int64_t end);

// Their pair logits (B,), and the labels on `device`.
torch::Tensor PairLogitsOf(model::DocumentModel& model, const PreparedPairs& prepared, const torch::Device& device,
                           torch::Tensor* labels);
// Both at once, for pairs [begin, end) of `order`.
torch::Tensor Logits(model::DocumentModel& model, const data::Corpus& corpus,
                     const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                     int64_t end, const torch::Device& device, torch::Tensor* labels);

// The labelled negatives of each source, for contrastive fine-tuning, and
// the mined ones after them.
class HardNegatives {
 public:
  explicit HardNegatives(const std::vector<data::LabelledPair>& pairs);
  // The mined negatives of every source, in place of the earlier ones
  // (after the labelled ones, each once).
  void SetMined(const std::unordered_map<int64_t, std::vector<int64_t>>& mined);
  const std::unordered_map<int64_t, std::vector<int64_t>>& mined() const { return mined_; }
  // Up to `count` of `source`'s negatives, drawn by (seed, epoch, pair): the
  // same on whichever rank the pair lands.
  std::vector<int64_t> Draw(int64_t source, int64_t count, uint64_t seed, int64_t epoch, int64_t pair) const;

 private:
  std::unordered_map<int64_t, std::vector<int64_t>> labelled_, mined_, by_source_;
};

// Vectors (in float32) of documents given by corpus index.
torch::Tensor EmbedDocuments(model::DocumentModel& model, const data::Corpus& corpus, const std::vector<int64_t>& ids,
                             const torch::Device& device);

// The documents of contrastive pairs [begin, end) of `pairs` taken in
// `order`: their sources, targets, and the labelled negatives drawn for them.
struct PairDocuments {
  std::vector<int64_t> sources, targets, negatives;
  std::vector<int64_t> All() const;  // sources, then targets, then negatives
};
PairDocuments DrawPairs(const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                        int64_t end, const HardNegatives& hard, int64_t hard_count, uint64_t seed, int64_t epoch);

// A chunk's documents read and batched on the host (any thread), once: the
// gradient cache's re-run embeds the same batch again.
struct PreparedChunk {
  PairDocuments documents;
  std::shared_ptr<const model::DocumentModel::HostBatch> batch;  // sources, targets, negatives
  int64_t tokens = 0;                                            // the tokens the model reads of them
};
PreparedChunk PrepareChunk(const model::DocumentModel& model, const data::Corpus& corpus, PairDocuments documents);

// Their vectors, from one pass of the encoder over all of them.
ContrastivePairs EmbedPairs(model::DocumentModel& model, const PreparedChunk& chunk, const torch::Device& device);

}  // namespace docmatch::train
