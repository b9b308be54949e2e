// DocSplit halves (data/batches/docsplit.h).
#include "data/batches/docsplit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "../test_corpus.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

// Sentence token lists of a document, by paragraph.
std::vector<std::vector<std::vector<int32_t>>> Structure(const Document& d) {
  std::vector<std::vector<std::vector<int32_t>>> out;
  for (int64_t p = 0; p < d.num_paragraphs(); ++p) {
    out.emplace_back();
    for (int64_t s = d.paragraph_offsets[p]; s < d.paragraph_offsets[p + 1]; ++s) out.back().push_back(d.Sentence(s));
  }
  return out;
}

TEST(SplitDocument, EverySentenceGoesToExactlyOneHalfInOrder) {
  int64_t first_total = 0, sentences_total = 0;
  for (int i = 0; i < 300; ++i) {
    const Document d = testing::SyntheticDocument(i, 21);
    const auto [a, b] = SplitDocument(d, /*seed=*/5, /*epoch=*/0);
    EXPECT_EQ(a.index, d.index);
    EXPECT_EQ(b.id, d.id);
    if (d.num_sentences() == 1) {
      EXPECT_EQ(a.tokens, d.tokens);
      EXPECT_EQ(b.tokens, d.tokens);
      continue;
    }
    ASSERT_GT(a.num_sentences(), 0);
    ASSERT_GT(b.num_sentences(), 0);
    EXPECT_EQ(a.num_sentences() + b.num_sentences(), d.num_sentences());
    EXPECT_EQ(a.num_tokens() + b.num_tokens(), d.num_tokens());
    // Merging the halves paragraph by paragraph, in order, gives the original:
    // walk the original and take each sentence from whichever half has it next.
    const auto sa = Structure(a), sb = Structure(b), sd = Structure(d);
    std::vector<std::vector<int32_t>> fa, fb;
    for (const auto& p : sa) fa.insert(fa.end(), p.begin(), p.end());
    for (const auto& p : sb) fb.insert(fb.end(), p.begin(), p.end());
    size_t ia = 0, ib = 0;
    for (const auto& p : sd) {
      for (const auto& s : p) {
        if (ia < fa.size() && fa[ia] == s) {
          ++ia;
        } else {
          ASSERT_TRUE(ib < fb.size() && fb[ib] == s) << "sentence lost or reordered, document " << i;
          ++ib;
        }
      }
    }
    EXPECT_LE(a.num_paragraphs(), d.num_paragraphs());
    first_total += a.num_sentences();
    sentences_total += d.num_sentences();
  }
  // A fair coin: close to half the sentences in the first half.
  EXPECT_NEAR(static_cast<double>(first_total) / sentences_total, 0.5, 0.05);
}

TEST(SplitDocument, DependsOnlyOnSeedEpochAndIndex) {
  const Document d = testing::SyntheticDocument(3, 40);
  const auto x = SplitDocument(d, 5, 2), y = SplitDocument(d, 5, 2);
  EXPECT_EQ(x.first.tokens, y.first.tokens);
  EXPECT_EQ(x.second.sentence_offsets, y.second.sentence_offsets);
  bool differs = false;
  for (int epoch = 3; epoch < 10 && !differs; ++epoch)
    differs = SplitDocument(d, 5, epoch).first.tokens != x.first.tokens;
  EXPECT_TRUE(differs);
}

TEST(BuildDocSplitBatch, FirstHalvesThenSecondHalvesWithSeparateMaskStreams) {
  std::vector<Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(testing::SyntheticDocument(i, 40));
  MaskOptions masks;
  masks.vocab_size = 1005;
  const BlockBatch batch = BuildDocSplitBatch({&docs[0], &docs[1], &docs[2]}, {8, 12}, &masks, 5, 2);
  ASSERT_EQ(batch.B, 6);
  EXPECT_EQ(batch.document_index, (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  // Same as building the halves by hand, view 0 for first halves and 1 for second.
  std::vector<Document> halves;
  for (const auto& d : docs) halves.push_back(SplitDocument(d, 5, 2).first);
  for (const auto& d : docs) halves.push_back(SplitDocument(d, 5, 2).second);
  std::vector<const Document*> views;
  for (const auto& h : halves) views.push_back(&h);
  const BlockBatch expected = BuildBlockBatch(views, {8, 12}, &masks, 2, {0, 0, 0, 1, 1, 1});
  EXPECT_EQ(batch.tokens, expected.tokens);
  EXPECT_EQ(batch.lm_labels, expected.lm_labels);
  // Without masks: the same halves, clean, nothing to predict.
  const BlockBatch clean = BuildDocSplitBatch({&docs[0], &docs[1], &docs[2]}, {8, 12}, nullptr, 5, 2);
  EXPECT_EQ(clean.tokens, BuildBlockBatch(views, {8, 12}, nullptr, 2).tokens);
  EXPECT_NE(clean.tokens, batch.tokens);
  EXPECT_TRUE(std::all_of(clean.lm_labels.begin(), clean.lm_labels.end(), [](int32_t l) { return l == kIgnoreLabel; }));
}

TEST(BuildFlatBatch, WordMasksOnRealTokensOnlyKeyedByDocumentAcrossWindows) {
  std::vector<Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(testing::SyntheticDocument(i, 40));
  MaskOptions masks;
  masks.vocab_size = 1005;
  const FlatOptions flat{10, /*separator=*/true, /*chunks=*/3};
  const FlatBatch plain = BuildFlatBatch({&docs[0], &docs[1], &docs[2]}, flat);
  const FlatBatch masked = BuildFlatBatch({&docs[0], &docs[1], &docs[2]}, flat, masks, /*epoch=*/1);
  ASSERT_GT(plain.B, 3);  // several windows per document
  EXPECT_EQ(masked.documents, 3);
  ASSERT_EQ(masked.lm_labels.size(), plain.tokens.size());
  std::vector<int64_t> real(3, 0), predicted(3, 0);
  for (int64_t b = 0; b < plain.B; ++b) {
    for (int64_t t = 0; t < plain.T; ++t) {
      const size_t i = b * plain.T + t;
      const int32_t original = plain.tokens[i];
      const bool maskable = t > 0 && original != kPadId && original != kSepId;
      real[plain.row_document[b]] += maskable;
      if (masked.lm_labels[i] == kIgnoreLabel) {
        EXPECT_EQ(masked.tokens[i], original) << "unpredicted tokens stay";
        continue;
      }
      ASSERT_TRUE(maskable) << "row " << b << " position " << t << " ([CLS], [SEP] or padding) is never predicted";
      EXPECT_EQ(masked.lm_labels[i], original);
      ++predicted[plain.row_document[b]];
    }
  }
  for (int d = 0; d < 3; ++d) EXPECT_EQ(predicted[d], std::max<int64_t>(1, std::llround(0.15 * real[d]))) << d;
  // A document's draw does not depend on its batch mates or position.
  const FlatBatch alone = BuildFlatBatch({&docs[1]}, flat, masks, /*epoch=*/1);
  const int64_t first =
      std::find(masked.row_document.begin(), masked.row_document.end(), 1) - masked.row_document.begin();
  for (int64_t b = 0; b < alone.B; ++b) {
    for (int64_t t = 0; t < alone.T; ++t) {
      EXPECT_EQ(alone.lm_labels[b * alone.T + t], masked.lm_labels[(first + b) * masked.T + t]);
    }
  }
}

TEST(BuildFlatDocSplitBatch, HalvesAsRowsWithOneMaskStreamPerHalfOrNone) {
  std::vector<Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(testing::SyntheticDocument(i, 40));
  MaskOptions masks;
  masks.vocab_size = 1005;
  const FlatOptions flat{16, false, 2};
  const FlatBatch batch = BuildFlatDocSplitBatch({&docs[0], &docs[1], &docs[2]}, flat, &masks, 5, 2);
  EXPECT_EQ(batch.documents, 6);
  std::vector<Document> halves;
  for (const auto& d : docs) halves.push_back(SplitDocument(d, 5, 2).first);
  for (const auto& d : docs) halves.push_back(SplitDocument(d, 5, 2).second);
  std::vector<const Document*> views;
  for (const auto& h : halves) views.push_back(&h);
  const FlatBatch expected = BuildFlatBatch(views, flat, masks, 2, {0, 0, 0, 1, 1, 1});
  EXPECT_EQ(batch.tokens, expected.tokens);
  EXPECT_EQ(batch.lm_labels, expected.lm_labels);
  EXPECT_EQ(batch.row_document, expected.row_document);
  const FlatBatch unmasked = BuildFlatDocSplitBatch({&docs[0], &docs[1], &docs[2]}, flat, nullptr, 5, 2);
  EXPECT_TRUE(unmasked.lm_labels.empty());
  EXPECT_EQ(unmasked.tokens, BuildFlatBatch(views, flat).tokens);
}

}  // namespace
}  // namespace docmatch::data
