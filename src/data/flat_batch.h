// MatchBERT's input: the first N tokens of each document as one flat
// sequence, [CLS] first, sentences concatenated (Yang et al. 2020, §5.2:
// N = 256 in the paper's BERT baseline).
#pragma once

#include <cstdint>
#include <vector>

#include "data/document.h"

namespace docmatch::data {

struct FlatBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;          // (B, T) [CLS] + first T-1 tokens, kPadId padding
  std::vector<int64_t> document_index;  // (B,)
  int64_t real_tokens = 0;
};

// T = the longest sequence in the batch, at most `max_tokens` ([CLS] included).
FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, int64_t max_tokens);

}  // namespace docmatch::data
