// Greedy sentence filling and SMITH's mask draws (data/batches/blocks.h).
#include "data/batches/blocks.h"

#include <gtest/gtest.h>

#include "../test_corpus.h"
#include "console/error.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

// A document whose sentence s has lengths[s] tokens, token ids 100*s + i.
Document DocumentWithSentences(const std::vector<int>& lengths, int64_t index = 0) {
  Document d;
  d.index = index;
  d.sentence_offsets = {0};
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int i = 0; i < lengths[s]; ++i) d.tokens.push_back(static_cast<int32_t>(100 * (s + 1) + i));
    d.sentence_offsets.push_back(d.num_tokens());
  }
  d.paragraph_offsets = {0, d.num_sentences()};
  return d;
}

std::vector<int32_t> Range(int32_t first, int count) {
  std::vector<int32_t> r;
  for (int i = 0; i < count; ++i) r.push_back(first + i);
  return r;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PackBlocks, FillsGreedilyTruncatesLongSentencesAndCapsBlocks) {
  // block_length 16 = [CLS] + 15: sentences of 5 and 10 share a block; the
  // 40-token sentence starts a new block, cut to 15; the 3-token one follows.
  const Document d = DocumentWithSentences({5, 10, 40, 3});
  const auto blocks = PackBlocks(d, {/*block_length=*/16, /*max_blocks=*/48});
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0], Cat(Cat({kClsId}, Range(100, 5)), Range(200, 10)));
  EXPECT_EQ(blocks[1], Cat({kClsId}, Range(300, 15)));
  EXPECT_EQ(blocks[2], Cat({kClsId}, Range(400, 3)));
  EXPECT_EQ(PackBlocks(d, {16, 2}).size(), 2u);
  // A sentence that exactly fills the remaining room stays in the block.
  const auto exact = PackBlocks(DocumentWithSentences({7, 8}), {16, 48});
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(exact[0].size(), 16u);
  EXPECT_TRUE(PackBlocks(DocumentWithSentences({}), {16, 48}).empty());
}

TEST(PackBlocks, ABlockWithNoRoomForAWordIsAnErrorNotAnAbort) {
  const Document d = DocumentWithSentences({5});
  for (const BlockOptions& options : {BlockOptions{/*block_length=*/2, 4, /*separator=*/true}, BlockOptions{1, 4}}) {
    try {
      PackBlocks(d, options);
      ADD_FAILURE() << "block_length " << options.block_length << " packed";
    } catch (const docmatch::Error& e) {
      EXPECT_NE(std::string(e.what()).find("block_length must be at least"), std::string::npos) << e.what();
    }
  }
  // The smallest block: [CLS], the sentence cut to one word, [SEP].
  EXPECT_EQ(PackBlocks(d, {/*block_length=*/3, 4, /*separator=*/true}).front().size(), 3u);
}

TEST(PackBlocks, WithSeparatorEachBlockEndsWithSepAndHoldsOneWordLess) {
  // block_length 16 = [CLS] + 14 + [SEP]: 5 and 10 no longer share a block
  // (5 + 10 > 14, where without [SEP] they fit in 15); the 40-token sentence
  // is cut to 14, a full block, so the 3-token one starts the fourth.
  const Document d = DocumentWithSentences({5, 10, 40, 3});
  const auto blocks = PackBlocks(d, {/*block_length=*/16, /*max_blocks=*/48, /*separator=*/true});
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[0], Cat(Cat({kClsId}, Range(100, 5)), {kSepId}));
  EXPECT_EQ(blocks[1], Cat(Cat({kClsId}, Range(200, 10)), {kSepId}));
  EXPECT_EQ(blocks[2], Cat(Cat({kClsId}, Range(300, 14)), {kSepId}));
  EXPECT_EQ(blocks[3], Cat(Cat({kClsId}, Range(400, 3)), {kSepId}));
  for (const auto& block : blocks) EXPECT_LE(block.size(), 16u);
  EXPECT_EQ(PackBlocks(d, {16, 2, true}).size(), 2u);
  // A sentence that exactly fills the room (14) keeps the block at 16 tokens.
  const auto exact = PackBlocks(DocumentWithSentences({6, 8}), {16, 48, true});
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(exact[0].size(), 16u);
  EXPECT_EQ(exact[0].back(), kSepId);
  EXPECT_TRUE(PackBlocks(DocumentWithSentences({}), {16, 48, true}).empty());
}

TEST(BuildBlockBatch, WordMasksNeverTouchClsOrSep) {
  std::vector<Document> docs;
  for (int i = 0; i < 200; ++i) docs.push_back(testing::SyntheticDocument(i, 31));
  std::vector<const Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  MaskOptions masks;
  masks.vocab_size = 1005;
  masks.word_fraction = 0.5;  // many draws, so a [SEP] in reach would be hit
  const BlockBatch batch = BuildBlockBatch(pointers, {8, 48, true}, &masks, 0);
  int64_t seps = 0, predicted = 0;
  for (int64_t row = 0; row < batch.B * batch.S; ++row) {
    if (!batch.block_mask[row]) continue;
    int64_t length = 0;
    while (length < batch.T && batch.tokens[row * batch.T + length] != kPadId) ++length;
    ASSERT_GE(length, 3);
    EXPECT_EQ(batch.tokens[row * batch.T], kClsId);
    EXPECT_EQ(batch.tokens[row * batch.T + length - 1], kSepId);
    EXPECT_EQ(batch.lm_labels[row * batch.T], kIgnoreLabel);
    EXPECT_EQ(batch.lm_labels[row * batch.T + length - 1], kIgnoreLabel);
    ++seps;
    for (int64_t t = 1; t + 1 < length; ++t) predicted += batch.lm_labels[row * batch.T + t] != kIgnoreLabel;
  }
  EXPECT_GT(seps, 200);
  EXPECT_GT(predicted, 0);
}

TEST(BuildBlockBatch, PadsToTheLongestDocumentAndBlock) {
  const Document a = DocumentWithSentences({5, 10, 40, 3}, 0), b = DocumentWithSentences({2}, 1);
  const BlockBatch batch = BuildBlockBatch({&a, &b}, {16, 48}, nullptr, 0);
  EXPECT_EQ(batch.B, 2);
  EXPECT_EQ(batch.S, 3);
  EXPECT_EQ(batch.T, 16);
  EXPECT_EQ(batch.block_mask, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(batch.real_tokens, 16 + 16 + 4 + 3);
  EXPECT_EQ(batch.tokens[(1 * 3 + 0) * 16 + 0], kClsId);
  EXPECT_EQ(batch.tokens[(1 * 3 + 0) * 16 + 3], kPadId);
  for (int32_t label : batch.lm_labels) EXPECT_EQ(label, kIgnoreLabel);
}

TEST(BuildBlockBatch, MasksDependOnlyOnSeedEpochAndDocumentIndex) {
  std::vector<Document> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(testing::SyntheticDocument(i));
  MaskOptions masks;
  masks.vocab_size = 1005;
  const BlockOptions blocks{8, 48};
  const BlockBatch ab = BuildBlockBatch({&docs[0], &docs[1]}, blocks, &masks, 3);
  const BlockBatch cba = BuildBlockBatch({&docs[2], &docs[1], &docs[0]}, blocks, &masks, 3);
  // Document 0 sits in row 0 of one batch and row 2 of the other; the
  // batches pad differently, so compare its real blocks only.
  auto rows = [](const BlockBatch& batch, int64_t b, const std::vector<int32_t>& values) {
    std::vector<std::vector<int32_t>> out;
    for (int64_t s = 0; s < batch.S && batch.block_mask[b * batch.S + s]; ++s) {
      std::vector<int32_t> block;
      for (int64_t t = 0; t < batch.T && batch.tokens[(b * batch.S + s) * batch.T + t] != kPadId; ++t) {
        block.push_back(values[(b * batch.S + s) * batch.T + t]);
      }
      out.push_back(block);
    }
    return out;
  };
  EXPECT_EQ(rows(ab, 0, ab.tokens), rows(cba, 2, cba.tokens));
  EXPECT_EQ(rows(ab, 0, ab.lm_labels), rows(cba, 2, cba.lm_labels));
  EXPECT_EQ(rows(ab, 1, ab.lm_labels), rows(cba, 1, cba.lm_labels));
  EXPECT_EQ(ab.masked_blocks[0], cba.masked_blocks[2 * cba.K]);
  EXPECT_EQ(ab.masked_blocks[1], cba.masked_blocks[2 * cba.K + 1]);
  const BlockBatch other_epoch = BuildBlockBatch({&docs[0], &docs[1]}, blocks, &masks, 4);
  EXPECT_NE(rows(ab, 0, ab.lm_labels), rows(other_epoch, 0, other_epoch.lm_labels));
  // Two views of one document draw different masks.
  const BlockBatch two_views = BuildBlockBatch({&docs[0], &docs[0]}, blocks, &masks, 3, {0, 1});
  EXPECT_EQ(rows(two_views, 0, two_views.lm_labels), rows(ab, 0, ab.lm_labels));
  EXPECT_NE(rows(two_views, 1, two_views.lm_labels), rows(two_views, 0, two_views.lm_labels));
}

TEST(BuildBlockBatch, MaskRatesFollowBert) {
  // Over many documents: 15% of real tokens predicted, of which ~80% [MASK],
  // ~10% random, ~10% unchanged; [CLS] and padding never predicted; two
  // distinct real blocks masked per document.
  std::vector<Document> docs;
  for (int i = 0; i < 400; ++i) docs.push_back(testing::SyntheticDocument(i, 31));
  std::vector<const Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  MaskOptions masks;
  masks.vocab_size = 1005;
  const BlockBatch batch = BuildBlockBatch(pointers, {8, 48}, &masks, 0);
  int64_t real = 0, predicted = 0, as_mask = 0, unchanged = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(batch.tokens.size()); ++i) {
    const bool is_real = batch.tokens[i] != kPadId && i % batch.T != 0;
    real += is_real;
    if (batch.lm_labels[i] == kIgnoreLabel) continue;
    ASSERT_TRUE(is_real) << i;
    ++predicted;
    as_mask += batch.tokens[i] == kMaskId;
    unchanged += batch.tokens[i] == batch.lm_labels[i];
  }
  EXPECT_NEAR(static_cast<double>(predicted) / real, 0.15, 0.01);
  EXPECT_NEAR(static_cast<double>(as_mask) / predicted, 0.8, 0.03);
  // Unchanged: the 10% kept plus random draws that hit the same token.
  EXPECT_NEAR(static_cast<double>(unchanged) / predicted, 0.1, 0.03);
  for (int64_t b = 0; b < batch.B; ++b) {
    const int64_t x = batch.masked_blocks[b * 2], y = batch.masked_blocks[b * 2 + 1];
    int64_t blocks = 0;
    for (int64_t s = 0; s < batch.S; ++s) blocks += batch.block_mask[b * batch.S + s];
    if (blocks >= 2) {
      EXPECT_NE(x, y);
      EXPECT_TRUE(x >= 0 && x < blocks && y >= 0 && y < blocks);
    } else {
      EXPECT_EQ(x, 0);
      EXPECT_EQ(y, -1);
    }
  }
}

}  // namespace
}  // namespace docmatch::data
