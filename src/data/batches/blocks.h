// SMITH's input: sentence blocks by greedy sentence filling, and the masks
// its pre-training draws over them (Yang et al., CIKM 2020, §3.3 and §4.2).
//
// BlockPacker: sentences are packed into blocks of at most `block_length`
// tokens with [CLS] first and, with `separator`, [SEP] last (as the official
// SMITH code and every BERT checkpoint read a sequence); a sentence that does
// not fit starts the next block;
// a sentence longer than a block is truncated to fill one block; at most
// `max_blocks` blocks per document (the rest of the document is dropped).
//
// Masks are drawn from a KeyedRandom keyed by (seed, epoch, document index),
// never from a per-rank stream: the same document gets the same masks on
// whichever rank reads it. Plain arrays, no torch: model/ turns a BlockBatch
// into tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "data/corpus/document.h"

namespace docmatch::data {

constexpr int32_t kIgnoreLabel = -100;  // label of tokens the LM loss skips

struct BlockOptions {
  int64_t block_length = 32;  // tokens per block, [CLS] (and [SEP]) included (paper: 32)
  int64_t max_blocks = 48;    // blocks per document (paper: 48)
  bool separator = false;     // end each block with [SEP]
};

// Blocks of one document, each [CLS] + up to block_length-1 tokens, or
// [CLS] + up to block_length-2 tokens + [SEP] with `separator`.
std::vector<std::vector<int32_t>> PackBlocks(const Document& document, const BlockOptions& options);

struct MaskOptions {
  double word_fraction = 0.15;  // share of a document's real tokens the LM predicts
  double replace_mask = 0.8;    // of those: [MASK]
  double replace_random = 0.1;  // random token; the rest stay unchanged
  int64_t masked_blocks = 2;    // sentence blocks masked per document (paper: 2)
  int64_t vocab_size = 16000;   // random replacements are drawn from [kMaskId+1, vocab_size)
  uint64_t seed = 1234;
};

// The masks `pretrain` draws: BERT's word rule for every objective, and
// MaskOptions' masked sentence blocks only where the objective predicts them
// (wp+sp); wp, docsplit and sdr mask words only.
MaskOptions PretrainingMasks(int64_t vocab_size, uint64_t seed, bool sentence_blocks);

// The masked word LM's draw, in one place for every model: BERT's rule over
// `positions` (indices into `tokens` of the maskable real tokens), keyed by
// (seed, view, epoch, document index). Writes the original ids to `labels`.
void MaskWords(const MaskOptions& masks, uint64_t view, int64_t epoch, uint64_t index,
               const std::vector<int64_t>& positions, std::vector<int32_t>* tokens, std::vector<int32_t>* labels);

// A padded batch of documents as blocks: B documents, S = the most blocks any
// of them has, T = the longest block. Row-major arrays.
struct BlockBatch {
  int64_t B = 0, S = 0, T = 0;
  std::vector<int32_t> tokens;          // (B, S, T) input ids, kPadId padding, LM masks applied
  std::vector<int32_t> lm_labels;       // (B, S, T) original id where the LM predicts, else kIgnoreLabel
  std::vector<uint8_t> block_mask;      // (B, S) 1 = real block
  std::vector<int64_t> masked_blocks;   // (B, K) block positions masked for SBP, -1 = none
  int64_t K = 0;                        // masked block slots per document
  std::vector<int64_t> document_index;  // (B,) corpus indices
  int64_t real_tokens = 0;              // non-pad tokens, for throughput figures
};

// Builds a batch; with `masks` null, no LM or block masks are drawn (fine-
// tuning, embedding). `epoch` keys the draws; `views` (one per document, or
// empty for all 0) separates the draws of several views of one document, such
// as DocSplit's two halves.
BlockBatch BuildBlockBatch(const std::vector<const Document*>& documents, const BlockOptions& blocks,
                           const MaskOptions* masks, int64_t epoch, const std::vector<uint64_t>& views = {});

}  // namespace docmatch::data
