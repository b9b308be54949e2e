// Hard negatives mined from the corpus, for contrastive fine-tuning: for each
// source of a related pair, the documents TF-IDF (or, refreshed as training
// goes, the model itself: ANCE, Xiong et al. 2021) ranks nearest to it that
// no label calls related. A document that shares the source's words but is not
// its positive is the negative a random or in-batch one is not; the filter
// leaves out what is probably an unlabelled positive.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "data/batches/pairs.h"
#include "eval/lexical.h"

namespace docmatch::train {

struct MinedNegatives {
  std::unordered_map<int64_t, std::vector<int64_t>> by_source;  // nearest first
  int64_t sources = 0;                                          // sources mined for
  int64_t dropped_related = 0;  // near documents left out: labelled related to the source (either direction)
  int64_t dropped_margin = 0;   // ... scoring above the source's best positive by more than the margin
};

// Up to `count` negatives for every source of a related pair in `pairs`, from
// `index` (the training corpus's TF-IDF, same document order): the nearest
// documents by cosine, leaving out the source itself, every document a label
// (1) pairs with it in either direction, and every document whose cosine
// exceeds that of the source's best-scoring positive by more than `margin`
// (a likely false negative; margin < 0 turns this filter off).
MinedNegatives MineLexicalNegatives(const eval::LexicalIndex& index, const std::vector<data::LabelledPair>& pairs,
                                    int64_t count, double margin);

// The same by the cosine of document vectors (N, D), in corpus order: the
// model's own nearest documents (finetune --refresh-negatives).
MinedNegatives MineDenseNegatives(const torch::Tensor& vectors, const std::vector<data::LabelledPair>& pairs,
                                  int64_t count, double margin);

// The rule both apply, for any similarity: `scores(sources)` gives the
// (Q, N) float64 scores of those documents against all `N`.
MinedNegatives MineNegatives(const std::function<torch::Tensor(const std::vector<int64_t>&)>& scores, int64_t N,
                             const std::vector<data::LabelledPair>& pairs, int64_t count, double margin);

}  // namespace docmatch::train
