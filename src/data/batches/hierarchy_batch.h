// SMASH RNN / HAN input (Jiang et al., WWW 2019): a document as paragraphs of
// sentences of words, truncated at each depth, plus the two flatter views the
// shallower depths read: the document's own sentences in order (up to
// max_document_sentences, whatever paragraphs they sit in), and its words in
// order. Sentences are left-aligned in their paragraph and paragraphs in their
// document, so each level's lengths are a prefix count.
#pragma once

#include <cstdint>
#include <vector>

#include "data/corpus/document.h"

namespace docmatch::data {

struct HierarchyOptions {
  int64_t max_paragraphs = 8;           // per document (the paragraph depth's grid)
  int64_t max_sentences = 8;            // per paragraph
  int64_t max_words = 32;               // per sentence, in the grid and in the sentence view
  int64_t max_document_sentences = 64;  // the sentence-depth view
  int64_t max_document_words = 512;     // the word-depth view
};

struct HierarchyBatch {
  int64_t B = 0, P = 0, S = 0, W = 0;   // grid: batch maxima after truncation
  std::vector<int32_t> tokens;          // (B, P, S, W) kPadId padding
  int64_t D = 0, L = 0;                 // sentence view: most sentences in a document, most words in one
  std::vector<int32_t> sentences;       // (B, D, L) the document's first sentences in order, kPadId padding
  int64_t N = 0;                        // most words in a document's word view
  std::vector<int32_t> words;           // (B, N) the first words of the document, kPadId padding
  std::vector<int64_t> document_index;  // (B,)
};

HierarchyBatch BuildHierarchyBatch(const std::vector<const Document*>& documents, const HierarchyOptions& options);

}  // namespace docmatch::data
