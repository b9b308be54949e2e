// SentencePiece training, reserved ids, round trips and load errors
// (data/text/tokenizer.h); WordPiece rules on hand-made cases (data/text/wordpiece.h;
// tests/io/hf_import_check.py compares it with the tokenizers library).
#include "data/text/tokenizer.h"

#include <fstream>

#include "data/text/wordpiece.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include "../test_corpus.h"

namespace docmatch::data {
namespace {

std::vector<std::string> Sentences(int count) { return testing::SyntheticSentences(count); }

Tokenizer TrainSmall(const std::string& path, const std::vector<std::string>& sentences) {
  size_t next = 0;
  TokenizerTrainingOptions options;
  options.vocab_size = 120;
  return Tokenizer::Train(
      [&](std::string* s) {
        if (next == sentences.size()) return false;
        *s = sentences[next++];
        return true;
      },
      options, path);
}

TEST(Tokenizer, TrainedModelReservesTheSpecialIds) {
  testing::ScratchDir dir("tokenizer");
  const Tokenizer tokenizer = TrainSmall(dir.File("m.model"), Sentences(2000));
  EXPECT_EQ(tokenizer.IdToPiece(kPadId), "[PAD]");
  EXPECT_EQ(tokenizer.IdToPiece(kUnkId), "<unk>");
  EXPECT_EQ(tokenizer.IdToPiece(kClsId), "[CLS]");
  EXPECT_EQ(tokenizer.IdToPiece(kSepId), "[SEP]");
  EXPECT_EQ(tokenizer.IdToPiece(kMaskId), "[MASK]");
  EXPECT_GT(tokenizer.vocab_size(), 40);
  EXPECT_LE(tokenizer.vocab_size(), 120);
  // Text never encodes to a reserved id other than <unk>.
  for (int32_t id : tokenizer.Encode("the river flows north [CLS] [MASK]")) {
    EXPECT_TRUE(id == kUnkId || id > kMaskId) << id;
  }
}

TEST(Tokenizer, EncodeDecodeRoundTripAndReload) {
  testing::ScratchDir dir("tokenizer");
  const std::vector<std::string> sentences = Sentences(2000);
  const Tokenizer trained = TrainSmall(dir.File("m.model"), sentences);
  const Tokenizer loaded = Tokenizer::Load(dir.File("m.model"));
  EXPECT_EQ(trained.hash(), loaded.hash());
  EXPECT_EQ(trained.hash().size(), 16u);
  for (int i = 0; i < 200; ++i) {
    const std::vector<int32_t> ids = trained.Encode(sentences[i]);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids, loaded.Encode(sentences[i]));
    EXPECT_EQ(trained.Decode(ids), sentences[i]);
  }
  // Unseen characters map to <unk> rather than failing.
  const std::vector<int32_t> unknown = trained.Encode("zebra");
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), kUnkId), unknown.end());
}

TEST(Tokenizer, LoadRejectsFilesThatAreNotModelsOrLackReservedIds) {
  testing::ScratchDir dir("tokenizer");
  testing::WriteFile(dir.File("junk.model"), "this is not a protobuf");
  try {
    Tokenizer::Load(dir.File("junk.model"));
    FAIL() << "loaded junk";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("junk.model"), std::string::npos) << e.what();
  }
  // A SentencePiece model with default settings has <unk>=0, <s>=1, </s>=2.
  std::vector<std::string> sentences = Sentences(500);
  size_t next = 0;
  struct Iterator : sentencepiece::SentenceIterator {
    std::vector<std::string>* s;
    size_t* i;
    bool done() const override { return *i >= s->size(); }
    void Next() override { ++*i; }
    const std::string& value() const override { return (*s)[*i]; }
    sentencepiece::util::Status status() const override { return {}; }
  } iterator;
  iterator.s = &sentences;
  iterator.i = &next;
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      {{"model_prefix", dir.File("plain")}, {"vocab_size", "60"}, {"hard_vocab_limit", "false"}}, &iterator);
  ASSERT_TRUE(status.ok()) << status.ToString();
  try {
    Tokenizer::Load(dir.File("plain.model"));
    FAIL() << "accepted a model without docmatch's reserved ids";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("[PAD]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::Load(dir.File("missing.model")), std::runtime_error);
}

WordPiece SmallWordPiece() {
  return WordPiece({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello", ",", "world", "!",
                    "cafe", "東", "京", "a", "##b"},
                   WordPieceOptions{}, kUnkId);
}

TEST(WordPiece, BasicTokenizationThenLongestMatchFirst) {
  const WordPiece w = SmallWordPiece();
  // Lower-cased, punctuation split off, "unaffable" = un ##aff ##able.
  EXPECT_EQ(w.Encode("Unaffable, HELLO world!"), (std::vector<int32_t>{5, 6, 7, 9, 8, 10, 11}));
  // Accents stripped (NFD, marks dropped), CJK ideographs spaced, control
  // characters dropped, any white space separates.
  EXPECT_EQ(w.Encode("Caf\u00e9\u6771\u4eac\x07\thello"), (std::vector<int32_t>{12, 13, 14, 8}));
  // No full cover: the whole word is [UNK], not a prefix of it.
  EXPECT_EQ(w.Encode("unaffablex hello"), (std::vector<int32_t>{kUnkId, 8}));
  // "ab" = a ##b; 100 characters are still looked at, 101 are [UNK].
  EXPECT_EQ(w.Encode("ab"), (std::vector<int32_t>{15, 16}));
  EXPECT_EQ(w.Encode("a" + std::string(99, 'b')).size(), 100u);
  EXPECT_EQ(w.Encode("a" + std::string(100, 'b')), (std::vector<int32_t>{kUnkId}));
  EXPECT_EQ(w.Decode({5, 6, 7, 9, 8}),
            "un"
            "aff"
            "able , hello");
  WordPieceOptions cased;
  cased.lowercase = cased.strip_accents = false;
  const WordPiece keep({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello"}, cased, kUnkId);
  EXPECT_EQ(keep.Encode("HELLO hello"), (std::vector<int32_t>{kUnkId, 5}));
}

TEST(WordPiece, ModelFileRoundTripAndReservedIdsChecked) {
  testing::ScratchDir dir("wordpiece");
  const Tokenizer saved = Tokenizer::SaveWordPiece(SmallWordPiece(), dir.File("wp.model"));
  const Tokenizer loaded = Tokenizer::Load(dir.File("wp.model"));
  EXPECT_STREQ(loaded.kind(), "wordpiece");
  EXPECT_EQ(loaded.hash(), saved.hash());
  EXPECT_EQ(loaded.vocab_size(), 17);
  EXPECT_EQ(loaded.Encode("Unaffable, HELLO world!"), (std::vector<int32_t>{5, 6, 7, 9, 8, 10, 11}));
  EXPECT_EQ(loaded.IdToPiece(kMaskId), "[MASK]");
  // [CLS] where [SEP] belongs: refused, naming the file and the id.
  const WordPiece wrong({"[PAD]", "[UNK]", "[SEP]", "[CLS]", "[MASK]"}, WordPieceOptions{}, kUnkId);
  { std::ofstream(dir.File("wrong.model")) << wrong.Serialize(); }
  try {
    Tokenizer::Load(dir.File("wrong.model"));
    FAIL() << "loaded a WordPiece model without [CLS] at 2";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong.model' does not hold [CLS] at id 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace docmatch::data
