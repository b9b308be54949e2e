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
    for (int64_t p = 0; p < paragraphs; ++p) {
      const int64_t n = std::min(d->paragraph_offsets[p + 1] - d->paragraph_offsets[p], options.max_sentences);
      batch.S = std::max(batch.S, n);
      for (int64_t s = d->paragraph_offsets[p]; s < d->paragraph_offsets[p] + n; ++s) {
        batch.W = std::max(batch.W, std::min(d->sentence_length(s), options.max_words));
      }
    }
    const int64_t sentences = std::min(d->num_sentences(), options.max_document_sentences);
    batch.D = std::max(batch.D, sentences);
    for (int64_t s = 0; s < sentences; ++s)
      batch.L = std::max(batch.L, std::min(d->sentence_length(s), options.max_words));
    batch.N = std::max(batch.N, std::min(d->num_tokens(), options.max_document_words));
  }
  const int64_t P = batch.P, S = batch.S, W = batch.W, D = batch.D, L = batch.L;
  batch.tokens.assign(batch.B * P * S * W, kPadId);
  batch.sentences.assign(batch.B * D * L, kPadId);
  batch.words.assign(batch.B * batch.N, kPadId);
  // Pass 2: fill.
  const auto copy_sentence = [](const Document& d, int64_t s, int64_t limit, std::vector<int32_t>::iterator out) {
    const auto begin = d.tokens.begin() + d.sentence_offsets[s];
    std::copy(begin, begin + std::min(d.sentence_length(s), limit), out);
  };
  for (int64_t b = 0; b < batch.B; ++b) {
    const Document& d = *documents[b];
    batch.document_index.push_back(d.index);
    for (int64_t p = 0; p < std::min(d.num_paragraphs(), P); ++p) {
      const int64_t n = std::min(d.paragraph_offsets[p + 1] - d.paragraph_offsets[p], S);
      for (int64_t k = 0; k < n; ++k) {
        copy_sentence(d, d.paragraph_offsets[p] + k, W, batch.tokens.begin() + ((b * P + p) * S + k) * W);
      }
    }
    for (int64_t s = 0; s < std::min(d.num_sentences(), D); ++s) {
      copy_sentence(d, s, L, batch.sentences.begin() + (b * D + s) * L);
    }
    const int64_t words = std::min(d.num_tokens(), batch.N);
    std::copy(d.tokens.begin(), d.tokens.begin() + words, batch.words.begin() + b * batch.N);
  }
  return batch;
}

}  // namespace docmatch::data
