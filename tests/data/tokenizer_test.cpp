// SentencePiece training, reserved ids, round trips and load errors (data/tokenizer.h).
#include "data/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include "test_corpus.h"

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

}  // namespace
}  // namespace docmatch::data
