#include "data/flat_batch.h"

#include <glog/logging.h>

#include <algorithm>

#include "data/tokenizer.h"

namespace docmatch::data {

FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, int64_t max_tokens) {
  CHECK_GE(max_tokens, 2) << "a flat sequence holds [CLS] and at least one token";
  FlatBatch batch;
  batch.B = static_cast<int64_t>(documents.size());
  for (const Document* d : documents) batch.T = std::max(batch.T, std::min(max_tokens, 1 + d->num_tokens()));
  batch.tokens.assign(batch.B * batch.T, kPadId);
  for (int64_t b = 0; b < batch.B; ++b) {
    const Document& d = *documents[b];
    const int64_t length = std::min(max_tokens - 1, d.num_tokens());
    batch.tokens[b * batch.T] = kClsId;
    std::copy(d.tokens.begin(), d.tokens.begin() + length, batch.tokens.begin() + b * batch.T + 1);
    batch.real_tokens += 1 + length;
    batch.document_index.push_back(d.index);
  }
  return batch;
}

}  // namespace docmatch::data
