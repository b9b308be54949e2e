// SDR sentence pairs (data/batches/sdr_batch.h).
#include "data/batches/sdr_batch.h"

#include <gtest/gtest.h>

#include "../test_corpus.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

// Which (paragraph, sentence) of `d` has exactly these tokens (synthetic
// sentences are distinct with overwhelming probability).
std::pair<int64_t, int64_t> Locate(const Document& d, const std::vector<int32_t>& tokens) {
  for (int64_t p = 0; p < d.num_paragraphs(); ++p) {
    for (int64_t s = d.paragraph_offsets[p]; s < d.paragraph_offsets[p + 1]; ++s) {
      if (d.Sentence(s) == tokens) return {p, s};
    }
  }
  return {-1, -1};
}

// `count` synthetic documents, and pointers to them for BuildSdrBatch.
struct Synthetic {
  Synthetic(int count, uint64_t seed) {
    for (int i = 0; i < count; ++i) docs.push_back(testing::SyntheticDocument(i, seed));
    for (const auto& d : docs) pointers.push_back(&d);
  }
  std::vector<Document> docs;
  std::vector<const Document*> pointers;
};

std::vector<int32_t> Row(const std::vector<int32_t>& v, int64_t b, int64_t T) {
  std::vector<int32_t> row(v.begin() + b * T, v.begin() + (b + 1) * T);
  while (!row.empty() && row.back() == kPadId) row.pop_back();
  return row;
}

TEST(SdrBatch, PairsComeFromOneParagraphAndHalfAreNegatives) {
  const Synthetic synthetic(400, 55);
  const std::vector<Document>& docs = synthetic.docs;
  const std::vector<const Document*>& pointers = synthetic.pointers;
  SdrOptions options;
  options.max_tokens = 64;  // longer than any synthetic sentence: nothing is cut
  const SdrBatch batch = BuildSdrBatch(pointers, options, nullptr, 0);
  int64_t positives = 0;
  for (int64_t b = 0; b < batch.B; ++b) {
    const Document& d = docs[b];
    const auto [pa, sa] = Locate(d, Row(batch.anchors, b, batch.T));
    const auto [pp, sp] = Locate(d, Row(batch.partners, b, batch.T));
    ASSERT_GE(sa, 0) << b;
    ASSERT_GE(sp, 0) << b;
    bool rich = false;  // does the document have a paragraph with two sentences?
    for (int64_t p = 0; p < d.num_paragraphs(); ++p) rich |= d.paragraph_offsets[p + 1] - d.paragraph_offsets[p] >= 2;
    if (rich) {
      EXPECT_EQ(pa, pp) << b;
      EXPECT_NE(sa, sp) << b;
    }
    if (batch.label[b] == 1.0f) {
      EXPECT_EQ(batch.pair[b], b);
      ++positives;
    } else {
      EXPECT_NE(batch.pair[b], b);
      EXPECT_TRUE(batch.pair[b] >= 0 && batch.pair[b] < batch.B);
    }
  }
  EXPECT_NEAR(static_cast<double>(positives) / batch.B, 0.5, 0.08);
}

TEST(SdrBatch, TruncatesMasksAndDependsOnlyOnTheDocument) {
  std::vector<Document> docs;
  for (int i = 0; i < 5; ++i) docs.push_back(testing::SyntheticDocument(i, 9));
  SdrOptions options;
  options.max_tokens = 4;
  MaskOptions masks;
  masks.vocab_size = 1005;
  const SdrBatch batch = BuildSdrBatch({&docs[0], &docs[1], &docs[2]}, options, &masks, 1);
  EXPECT_LE(batch.T, 4);
  int64_t masked = 0;
  for (int32_t label : batch.anchor_labels) masked += label != kIgnoreLabel;
  EXPECT_GE(masked, 3);  // at least one per anchor
  // Document 1's anchor and partner do not depend on its batch mates.
  const SdrBatch other = BuildSdrBatch({&docs[4], &docs[1]}, options, &masks, 1);
  EXPECT_EQ(Row(batch.anchors, 1, batch.T), Row(other.anchors, 1, other.T));
  EXPECT_EQ(Row(batch.partner_labels, 1, batch.T), Row(other.partner_labels, 1, other.T));
}

TEST(SdrBatch, SeparatorRowsReadClsSentenceSepAndTheirMarksAreNeverMasked) {
  // Rows of at most 6 tokens: [CLS], the sentence's first 4, [SEP]. With
  // half of every row's words masked, [CLS] and [SEP] stay and carry no label.
  const Synthetic synthetic(40, 21);
  const std::vector<Document>& docs = synthetic.docs;
  const std::vector<const Document*>& pointers = synthetic.pointers;
  SdrOptions options;
  options.max_tokens = 6;
  options.separator = true;
  const SdrBatch clean = BuildSdrBatch(pointers, options, nullptr, 0);
  MaskOptions masks;
  masks.vocab_size = 1005;
  masks.word_fraction = 0.5;
  const SdrBatch masked = BuildSdrBatch(pointers, options, &masks, 0);
  EXPECT_LE(clean.T, 6);
  int64_t labelled = 0;
  for (int64_t b = 0; b < clean.B; ++b) {
    for (const auto* rows : {&clean.anchors, &clean.partners}) {
      const std::vector<int32_t> row = Row(*rows, b, clean.T);
      ASSERT_GE(row.size(), 3u) << b;
      EXPECT_EQ(row.front(), kClsId) << b;
      EXPECT_EQ(row.back(), kSepId) << b;
      const std::vector<int32_t> words(row.begin() + 1, row.end() - 1);
      const auto [p, s] = Locate(docs[b], words);
      if (s < 0) {  // cut: the words are the first 4 of one of its sentences
        bool found = false;
        for (int64_t t = 0; t < docs[b].num_sentences(); ++t) {
          const std::vector<int32_t> sentence = docs[b].Sentence(t);
          found |= sentence.size() > 4 && std::vector<int32_t>(sentence.begin(), sentence.begin() + 4) == words;
        }
        EXPECT_TRUE(found) << b;
      }
    }
    for (const auto& [rows, labels] :
         {std::pair{&masked.anchors, &masked.anchor_labels}, std::pair{&masked.partners, &masked.partner_labels}}) {
      const std::vector<int32_t> row = Row(*rows, b, masked.T);
      EXPECT_EQ(row.front(), kClsId) << b;
      EXPECT_EQ(row.back(), kSepId) << b;
      EXPECT_EQ((*labels)[b * masked.T], kIgnoreLabel) << b;
      EXPECT_EQ((*labels)[b * masked.T + static_cast<int64_t>(row.size()) - 1], kIgnoreLabel) << b;
      for (int64_t t = 1; t + 1 < static_cast<int64_t>(row.size()); ++t)
        labelled += (*labels)[b * masked.T + t] != kIgnoreLabel;
    }
  }
  EXPECT_GT(labelled, 0);
}

}  // namespace
}  // namespace docmatch::data
