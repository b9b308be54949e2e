// MatchBERT's windows: sentences concatenated after [CLS], cut to the window
// length, [SEP]-ended and several per document when configured (flat_batch.h).
#include "data/batches/flat_batch.h"

#include <glog/logging.h>

#include <algorithm>
#include <stdexcept>

#include "console/error.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {

FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, const FlatOptions& options) {
  const int64_t window = options.max_tokens - 1 - (options.separator ? 1 : 0);  // real tokens per row
  if (window < 1) {
    throw Error("data", "a window of " + std::to_string(options.max_tokens) +
                            " tokens has no room for a word after [CLS]" + (options.separator ? " and [SEP]" : "") +
                            ": the model's max_tokens must be at least " +
                            std::to_string(options.max_tokens - window + 1));
  }
  if (options.chunks < 1) {
    throw Error("data", "the model's chunks (windows a document) is " + std::to_string(options.chunks) +
                            "; it must be at least 1");
  }
  struct Row {
    int64_t document, begin, length;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < documents.size(); ++i) {
    const int64_t n = documents[i]->num_tokens();
    const int64_t count = std::max<int64_t>(1, std::min(options.chunks, (n + window - 1) / window));
    for (int64_t c = 0; c < count; ++c) {
      rows.push_back({static_cast<int64_t>(i), c * window, std::min(window, std::max<int64_t>(0, n - c * window))});
    }
  }
  FlatBatch batch;
  batch.B = static_cast<int64_t>(rows.size());
  for (const Row& r : rows) batch.T = std::max(batch.T, 1 + r.length + (options.separator ? 1 : 0));
  batch.tokens.assign(batch.B * batch.T, kPadId);
  for (int64_t b = 0; b < batch.B; ++b) {
    const Row& r = rows[b];
    const Document& d = *documents[r.document];
    int32_t* row = batch.tokens.data() + b * batch.T;
    row[0] = kClsId;
    std::copy_n(d.tokens.begin() + r.begin, r.length, row + 1);
    if (options.separator) row[1 + r.length] = kSepId;
    batch.real_tokens += 1 + r.length + (options.separator ? 1 : 0);
    batch.document_index.push_back(d.index);
    batch.row_document.push_back(r.document);
  }
  batch.documents = static_cast<int64_t>(documents.size());
  return batch;
}

FlatBatch BuildFlatBatch(const std::vector<const Document*>& documents, const FlatOptions& options,
                         const MaskOptions& masks, int64_t epoch, const std::vector<uint64_t>& views) {
  if (!views.empty() && views.size() != documents.size()) {
    throw std::logic_error("[data] BuildFlatBatch: one view number per document");
  }
  FlatBatch batch = BuildFlatBatch(documents, options);
  batch.lm_labels.assign(batch.tokens.size(), kIgnoreLabel);
  // Each document's maskable positions over all its rows (rows are in document order).
  std::vector<std::vector<int64_t>> positions(documents.size());
  for (int64_t b = 0; b < batch.B; ++b) {
    const int32_t* row = batch.tokens.data() + b * batch.T;
    for (int64_t t = 1; t < batch.T; ++t) {
      if (row[t] != kPadId && row[t] != kSepId) positions[batch.row_document[b]].push_back(b * batch.T + t);
    }
  }
  for (size_t i = 0; i < documents.size(); ++i) {
    MaskWords(masks, views.empty() ? 0 : views[i], epoch, static_cast<uint64_t>(documents[i]->index), positions[i],
              &batch.tokens, &batch.lm_labels);
  }
  return batch;
}

}  // namespace docmatch::data
