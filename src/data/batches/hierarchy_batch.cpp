// SMASH / HAN batches: a document truncated into its paragraph, sentence and
// word grids, padded to the batch's sizes (hierarchy_batch.h).
#include "data/batches/hierarchy_batch.h"

#include <glog/logging.h>

#include <algorithm>

#include "data/text/tokenizer.h"

namespace docmatch::data {

HierarchyBatch BuildHierarchyBatch(const std::vector<const Document*>& documents, const HierarchyOptions& options) {
  HierarchyBatch batch;
  batch.B = static_cast<int64_t>(documents.size());
  // Pass 1: the batch's maxima after truncation.
  for (const Document* d : documents) {
    const int64_t paragraphs = std::min(d->num_paragraphs(), options.max_paragraphs);
    batch.P = std::max(batch.P, paragraphs);
    int64_t sentences = 0;
    for (int64_t p = 0; p < paragraphs; ++p) {
      const int64_t n = std::min(d->paragraph_offsets[p + 1] - d->paragraph_offsets[p], options.max_sentences);
      batch.S = std::max(batch.S, n);
      sentences += n;
      for (int64_t s = d->paragraph_offsets[p]; s < d->paragraph_offsets[p] + n; ++s) {
        batch.W = std::max(batch.W, std::min(d->sentence_offsets[s + 1] - d->sentence_offsets[s], options.max_words));
      }
    }
    batch.D = std::max(batch.D, sentences);
    batch.N = std::max(batch.N, std::min(d->num_tokens(), options.max_document_words));
  }
  const int64_t P = batch.P, S = batch.S, W = batch.W;
  batch.tokens.assign(batch.B * P * S * W, kPadId);
  batch.sentence_order.assign(batch.B * batch.D, -1);
  batch.words.assign(batch.B * batch.N, kPadId);
  // Pass 2: fill.
  for (int64_t b = 0; b < batch.B; ++b) {
    const Document& d = *documents[b];
    batch.document_index.push_back(d.index);
    int64_t order = 0;
    for (int64_t p = 0; p < std::min(d.num_paragraphs(), P); ++p) {
      const int64_t n = std::min(d.paragraph_offsets[p + 1] - d.paragraph_offsets[p], S);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t s = d.paragraph_offsets[p] + k;
        const int64_t length = std::min(d.sentence_offsets[s + 1] - d.sentence_offsets[s], W);
        std::copy(d.tokens.begin() + d.sentence_offsets[s], d.tokens.begin() + d.sentence_offsets[s] + length,
                  batch.tokens.begin() + ((b * P + p) * S + k) * W);
        batch.sentence_order[b * batch.D + order++] = p * S + k;
      }
    }
    const int64_t words = std::min(d.num_tokens(), batch.N);
    std::copy(d.tokens.begin(), d.tokens.begin() + words, batch.words.begin() + b * batch.N);
  }
  return batch;
}

}  // namespace docmatch::data
