// SDR's training pairs (Ginzburg et al., 2021, §3): per document an anchor
// sentence and a partner from the same paragraph; with probability 0.5 the
// pair is that positive, otherwise the anchor meets the partner of another
// document of the batch (a negative). Sentences are truncated to
// `max_tokens`; both sides carry MLM masks. All draws are keyed by
// (seed, epoch, document index).
#pragma once

#include <cstdint>
#include <vector>

#include "data/batches/blocks.h"
#include "data/corpus/document.h"

namespace docmatch::data {

struct SdrOptions {
  int64_t max_tokens = 64;  // tokens per sentence row, [CLS] and [SEP] included (longer ones are cut)
  double positive_rate = 0.5;
  uint64_t seed = 1234;    // keys the pair draws
  bool separator = false;  // rows read [CLS] sentence [SEP]; the word masks never touch the two
};

struct SdrBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> anchors;         // (B, T) kPadId padding, MLM masks applied
  std::vector<int32_t> anchor_labels;   // (B, T) original ids where masked, else kIgnoreLabel
  std::vector<int32_t> partners;        // (B, T)
  std::vector<int32_t> partner_labels;  // (B, T)
  std::vector<int64_t> pair;            // (B,) index into the (global) partners of each anchor's pair
  std::vector<float> label;             // (B,) 1 = same paragraph, 0 = another document
  std::vector<int64_t> document_index;  // (B,)
};

// Sentence `s` of `d` as SDR reads it: its first max_tokens tokens, or with
// `separator` [CLS] + its first max_tokens - 2 + [SEP]. Training and
// embedding both read sentences through this.
std::vector<int32_t> SdrSentenceRow(const Document& d, int64_t s, int64_t max_tokens, bool separator);

// `masks` null: no MLM masks (evaluation). On N ranks, `global_offset` is
// this rank's first position in the global batch of `global_size` documents:
// a negative's partner is then drawn from the whole global batch and `pair`
// indexes the all-gathered partners, so the pairs do not depend on how the
// batch is split over ranks. Defaults: this batch is the global batch.
SdrBatch BuildSdrBatch(const std::vector<const Document*>& documents, const SdrOptions& options,
                       const MaskOptions* masks, int64_t epoch, int64_t global_offset = 0, int64_t global_size = -1);

}  // namespace docmatch::data
