// SMASH RNN / HAN input (Jiang et al., WWW 2019): a document as paragraphs of
// sentences of words, truncated at each depth, plus the two flatter views the
// shallower depths read: all sentences in order, and all words in order.
// Sentences are left-aligned in their paragraph and paragraphs in their
// document, so each level's lengths are a prefix count.
#pragma once

#include <cstdint>
#include <vector>

#include "data/corpus/document.h"

namespace docmatch::data {

struct HierarchyOptions {
  int64_t max_paragraphs = 8;        // per document
  int64_t max_sentences = 8;         // per paragraph
  int64_t max_words = 32;            // per sentence
  int64_t max_document_words = 512;  // the word-depth view
};

struct HierarchyBatch {
  int64_t B = 0, P = 0, S = 0, W = 0;   // batch maxima after truncation
  std::vector<int32_t> tokens;          // (B, P, S, W) kPadId padding
  int64_t D = 0;                        // most sentences in a document
  std::vector<int64_t> sentence_order;  // (B, D) flat p*S+s of the document's sentences in order, -1 padding
  int64_t N = 0;                        // most words in a document's word view
  std::vector<int32_t> words;           // (B, N) the first words of the document, kPadId padding
  std::vector<int64_t> document_index;  // (B,)
};

HierarchyBatch BuildHierarchyBatch(const std::vector<const Document*>& documents, const HierarchyOptions& options);

}  // namespace docmatch::data
