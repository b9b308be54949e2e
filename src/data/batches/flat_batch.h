// MatchBERT's input: each document as flat sequences, [CLS] first, sentences
// concatenated (Yang et al. 2020, §5.2: the first N = 256 tokens in the
// paper's BERT baseline).
//
// With `chunks` > 1 a document is cut into up to that many consecutive
// windows of N tokens (what sentence-transformers users do with a long
// text), one row each; `separator` ends every row with [SEP], as BERT was
// pre-trained to read.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batches/blocks.h"
#include "data/corpus/document.h"

namespace docmatch::data {

struct FlatBatch {
  int64_t B = 0, T = 0;                 // B rows: one per document, or one per window
  std::vector<int32_t> tokens;          // (B, T) [CLS] + tokens (+ [SEP]), kPadId padding
  std::vector<int64_t> document_index;  // (B,) the corpus index of each row's document
  std::vector<int64_t> row_document;    // (B,) each row's position in the input documents
  std::vector<int32_t> lm_labels;       // (B, T) original id where the word LM predicts, else kIgnoreLabel;
                                        // empty without masks
  int64_t documents = 0;                // input documents (fewer than B rows with chunks)
  int64_t real_tokens = 0;
};

struct FlatOptions {
  int64_t max_tokens = 256;  // N, [CLS] (and [SEP]) included
  bool separator = false;
  int64_t chunks = 1;  // windows per document, at most
};

// T = the longest row in the batch, at most `max_tokens`. A document without
// tokens still gets one row ([CLS] alone, or [CLS][SEP]).
FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, const FlatOptions& options);
// The same rows with the masked word LM's draw applied (pre-training a flat
// encoder): BERT's rule over each document's real tokens in its rows ([CLS]
// and [SEP] never), keyed by (seed, view, epoch, corpus index) as for blocks,
// so a document is masked alike on whichever rank reads it. `views` (one per
// document, or empty for all 0) separates the draws of DocSplit's halves.
FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, const FlatOptions& options,
                         const MaskOptions& masks, int64_t epoch, const std::vector<uint64_t>& views = {});
inline FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, int64_t max_tokens) {
  return BuildFlatBatch(documents, FlatOptions{max_tokens, false, 1});
}

}  // namespace docmatch::data
