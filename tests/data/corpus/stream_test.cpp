// ShardStream: exactly-once epochs over any number of ranks, deterministic
// shuffles, and cursors that resume exactly (data/corpus/shard_stream.h).
#include "data/corpus/shard_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "../test_corpus.h"
#include "console/error.h"

namespace docmatch::data {
namespace {

// Uneven shards, a chunk size that does not divide them, small windows.
class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<testing::ScratchDir>("stream");
    testing::WriteSyntheticCorpus(dir_->path(), {37, 50, 13});
    corpus_ = std::make_shared<Corpus>(dir_->path());
  }
  StreamOptions Options(int rank, int world) const {
    StreamOptions o;
    o.seed = 99;
    o.rank = rank;
    o.world_size = world;
    o.chunk_documents = 8;
    o.window_chunks = 3;
    o.prefetch_windows = 2;
    return o;
  }
  static std::vector<int64_t> Drain(ShardStream* stream) {
    std::vector<int64_t> indices;
    while (auto d = stream->Next()) indices.push_back(d->index);
    return indices;
  }

  std::unique_ptr<testing::ScratchDir> dir_;
  std::shared_ptr<const Corpus> corpus_;
};

TEST_F(StreamTest, EveryDocumentExactlyOncePerEpochForAnyWorldSize) {
  for (int world : {1, 2, 3, 7, 150}) {  // 7 > 3 shards; 150 > 100 documents
    for (int64_t epoch : {0, 1}) {
      std::vector<int64_t> seen;
      std::vector<int64_t> share_sizes;
      for (int rank = 0; rank < world; ++rank) {
        ShardStream stream(corpus_, Options(rank, world));
        stream.StartEpoch(epoch);
        const std::vector<int64_t> part = Drain(&stream);
        EXPECT_EQ(static_cast<int64_t>(part.size()), stream.epoch_size());
        share_sizes.push_back(static_cast<int64_t>(part.size()));
        seen.insert(seen.end(), part.begin(), part.end());
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(100);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(seen, all) << "world " << world << " epoch " << epoch;
      const auto [lo, hi] = std::minmax_element(share_sizes.begin(), share_sizes.end());
      EXPECT_LE(*hi - *lo, 1) << "world " << world;
    }
  }
}

TEST_F(StreamTest, DocumentsMatchRandomAccess) {
  ShardStream stream(corpus_, Options(1, 3));
  int checked = 0;
  while (auto d = stream.Next()) {
    const Document expected = corpus_->Get(d->index);
    EXPECT_EQ(d->id, expected.id);
    EXPECT_EQ(d->tokens, expected.tokens);
    EXPECT_EQ(d->sentence_offsets, expected.sentence_offsets);
    ++checked;
  }
  EXPECT_EQ(checked, stream.epoch_size());
}

TEST_F(StreamTest, OrderIsAFunctionOfSeedAndEpoch) {
  ShardStream a(corpus_, Options(0, 1)), b(corpus_, Options(0, 1));
  const auto a0 = Drain(&a), b0 = Drain(&b);
  EXPECT_EQ(a0, b0);
  a.StartEpoch(1);
  const auto a1 = Drain(&a);
  EXPECT_NE(a0, a1);
  StreamOptions other = Options(0, 1);
  other.seed = 100;
  ShardStream c(corpus_, other);
  EXPECT_NE(a0, Drain(&c));
  // Shuffled at all: not the corpus order.
  std::vector<int64_t> sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(a0, sorted);
}

TEST_F(StreamTest, UnshuffledStreamReadsInCorpusOrder) {
  StreamOptions o = Options(0, 1);
  o.shuffle = false;
  ShardStream stream(corpus_, o);
  std::vector<int64_t> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(Drain(&stream), expected);
}

TEST_F(StreamTest, RestoredCursorYieldsExactlyTheRestOfTheSequence) {
  for (int world : {1, 3}) {
    for (int64_t stop_after : {0, 1, 7, 8, 23, 33}) {
      ShardStream original(corpus_, Options(world - 1, world));
      original.StartEpoch(2);
      const int64_t stop = std::min(stop_after, original.epoch_size());
      for (int64_t i = 0; i < stop; ++i) ASSERT_TRUE(original.Next().has_value());
      const StreamCursor cursor = StreamCursor::FromJson(nlohmann::json::parse(original.cursor().ToJson().dump()));
      EXPECT_EQ(cursor.position, stop);
      EXPECT_EQ(cursor.epoch, 2);
      const std::vector<int64_t> rest = Drain(&original);

      ShardStream resumed(corpus_, Options(world - 1, world));  // a new process, in effect
      resumed.Restore(cursor);
      EXPECT_EQ(Drain(&resumed), rest) << "world " << world << " stop " << stop;
    }
  }
}

TEST_F(StreamTest, CursorOfAnotherRankIsRefused) {
  ShardStream stream(corpus_, Options(0, 2));
  StreamCursor cursor = stream.cursor();
  cursor.rank = 1;
  EXPECT_THROW(stream.Restore(cursor), docmatch::Error);
  EXPECT_THROW(ShardStream(corpus_, Options(2, 2)), docmatch::Error);
}

TEST_F(StreamTest, StoppingMidEpochJoinsTheReaderThread) {
  // Destroying a stream whose reader is blocked on a full queue must not hang.
  StreamOptions o = Options(0, 1);
  o.window_chunks = 1;
  o.prefetch_windows = 1;
  for (int i = 0; i < 20; ++i) {
    ShardStream stream(corpus_, o);
    stream.Next();
  }
}

}  // namespace
}  // namespace docmatch::data
