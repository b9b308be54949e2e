// SMASH's hierarchical batch (data/batches/hierarchy_batch.h).
#include "data/batches/hierarchy_batch.h"

#include <gtest/gtest.h>

#include "../test_corpus.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

TEST(HierarchyBatch, TruncatesEachDepthAndKeepsOrder) {
  const Document a = testing::SyntheticDocument(0, 2), b = testing::SyntheticDocument(1, 2);
  HierarchyOptions options;
  options.max_paragraphs = 2;
  options.max_sentences = 3;
  options.max_words = 4;
  options.max_document_sentences = 5;
  options.max_document_words = 10;
  const HierarchyBatch batch = BuildHierarchyBatch({&a, &b}, options);
  EXPECT_LE(batch.P, 2);
  EXPECT_LE(batch.S, 3);
  EXPECT_LE(batch.W, 4);
  EXPECT_LE(batch.N, 10);
  for (int64_t d = 0; d < 2; ++d) {
    const Document& doc = d == 0 ? a : b;
    for (int64_t p = 0; p < std::min<int64_t>(doc.num_paragraphs(), 2); ++p) {
      for (int64_t k = 0; k < std::min<int64_t>(doc.paragraph_offsets[p + 1] - doc.paragraph_offsets[p], 3); ++k) {
        const auto sentence = doc.Sentence(doc.paragraph_offsets[p] + k);
        for (int64_t w = 0; w < batch.W; ++w) {
          const int32_t expected = w < std::min<int64_t>(4, sentence.size()) ? sentence[w] : kPadId;
          EXPECT_EQ(batch.tokens[((d * batch.P + p) * batch.S + k) * batch.W + w], expected);
        }
      }
    }
    // The sentence view: the document's own first 5 sentences, whatever
    // paragraph they sit in (past the grid's 3 per paragraph), 4 words each.
    EXPECT_LE(batch.D, 5);
    EXPECT_LE(batch.L, 4);
    for (int64_t s = 0; s < batch.D; ++s) {
      const auto sentence = s < doc.num_sentences() ? doc.Sentence(s) : std::vector<int32_t>();
      for (int64_t w = 0; w < batch.L; ++w) {
        const int32_t expected = w < std::min<int64_t>(4, sentence.size()) ? sentence[w] : kPadId;
        EXPECT_EQ(batch.sentences[(d * batch.D + s) * batch.L + w], expected) << d << " " << s << " " << w;
      }
    }
    for (int64_t w = 0; w < batch.N; ++w) {
      EXPECT_EQ(batch.words[d * batch.N + w], w < std::min<int64_t>(10, doc.num_tokens()) ? doc.tokens[w] : kPadId);
    }
  }
}

}  // namespace
}  // namespace docmatch::data
