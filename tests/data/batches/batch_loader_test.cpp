// BatchLoader: same batches as building them by hand, in stream order with 1
// or 3 builder threads, exact resume from the cursor of the last batch taken,
// errors surface on the caller's thread.
#include "data/batches/batch_loader.h"

#include <gtest/gtest.h>

#include "../test_corpus.h"
#include "data/batches/blocks.h"

namespace docmatch::data {
namespace {

class BatchLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<testing::ScratchDir>("loader");
    testing::WriteSyntheticCorpus(dir_->path(), {30, 25});
    corpus_ = std::make_shared<Corpus>(dir_->path());
    options_.seed = 5;
    options_.chunk_documents = 4;
    options_.window_chunks = 2;
    masks_.vocab_size = 1005;
  }
  std::shared_ptr<ShardStream> Stream(int64_t epoch = 0) {
    auto stream = std::make_shared<ShardStream>(corpus_, options_);
    stream->StartEpoch(epoch);
    return stream;
  }
  BatchLoader<BlockBatch>::Builder Builder() {
    return [this](const std::vector<const Document*>& docs, int64_t epoch) {
      return BuildBlockBatch(docs, {8, 12}, &masks_, epoch);
    };
  }
  void ExpectTheBatchesAStreamGivesByHand(int builders);
  void ExpectExactResume(int builders);
  std::unique_ptr<testing::ScratchDir> dir_;
  std::shared_ptr<const Corpus> corpus_;
  StreamOptions options_;
  MaskOptions masks_;
};

TEST_F(BatchLoaderTest, YieldsTheBatchesAStreamGivesByHandAndDropsThePartialOne) {
  for (int builders : {1, 3}) {
    SCOPED_TRACE("builders " + std::to_string(builders));
    ExpectTheBatchesAStreamGivesByHand(builders);
  }
}

TEST_F(BatchLoaderTest, ResumingFromTheCursorContinuesExactly) {
  for (int builders : {1, 3}) {
    SCOPED_TRACE("builders " + std::to_string(builders));
    ExpectExactResume(builders);
  }
}

void BatchLoaderTest::ExpectTheBatchesAStreamGivesByHand(int builders) {
  BatchLoader<BlockBatch> loader(Stream(1), 8, Builder(), /*prefetch=*/2, /*drop_last=*/true, builders);
  auto reference = Stream(1);
  int batches = 0;
  while (auto batch = loader.Next()) {
    std::vector<Document> docs;
    for (int i = 0; i < 8; ++i) docs.push_back(*reference->Next());
    std::vector<const Document*> pointers;
    for (const auto& d : docs) pointers.push_back(&d);
    const BlockBatch expected = BuildBlockBatch(pointers, {8, 12}, &masks_, 1);
    EXPECT_EQ(batch->document_index, expected.document_index);
    EXPECT_EQ(batch->tokens, expected.tokens);
    EXPECT_EQ(batch->lm_labels, expected.lm_labels);
    ++batches;
  }
  EXPECT_EQ(batches, 55 / 8);  // 6 full batches, the 7 leftover documents dropped
}

void BatchLoaderTest::ExpectExactResume(int builders) {
  std::vector<std::vector<int64_t>> all;
  {
    BatchLoader<BlockBatch> loader(Stream(), 5, Builder(), /*prefetch=*/4, /*drop_last=*/true, builders);
    while (auto batch = loader.Next()) all.push_back(batch->document_index);
  }
  StreamCursor cursor;
  {
    // Take three batches while the loader reads ahead, then "checkpoint".
    BatchLoader<BlockBatch> loader(Stream(), 5, Builder(), /*prefetch=*/4, /*drop_last=*/true, builders);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(loader.Next()->document_index, all[i]);
    cursor = loader.cursor();
  }
  EXPECT_EQ(cursor.position, 15);
  auto resumed_stream = std::make_shared<ShardStream>(corpus_, options_);
  resumed_stream->Restore(cursor);
  BatchLoader<BlockBatch> resumed(resumed_stream, 5, Builder(), /*prefetch=*/4, /*drop_last=*/true, builders);
  for (size_t i = 3; i < all.size(); ++i) EXPECT_EQ(resumed.Next()->document_index, all[i]) << i;
  EXPECT_FALSE(resumed.Next().has_value());
}

TEST_F(BatchLoaderTest, AnErrorInTheBuilderReachesTheCaller) {
  for (int builders : {1, 3}) {
    BatchLoader<BlockBatch> loader(
        Stream(), 4,
        [](const std::vector<const Document*>&, int64_t) -> BlockBatch {
          throw std::runtime_error("builder failed on purpose");
        },
        /*prefetch=*/4, /*drop_last=*/true, builders);
    EXPECT_THROW(loader.Next(), std::runtime_error) << "builders " << builders;
  }
}

TEST_F(BatchLoaderTest, ThePartialLastBatchComesWhenKept) {
  BatchLoader<BlockBatch> loader(Stream(), 8, Builder(), /*prefetch=*/3, /*drop_last=*/false, /*builders=*/3);
  int64_t documents = 0, batches = 0;
  while (auto batch = loader.Next()) {
    documents += batch->B;
    ++batches;
  }
  EXPECT_EQ(documents, 55);
  EXPECT_EQ(batches, 7);  // 6 of 8 and the last of 7
}

}  // namespace
}  // namespace docmatch::data
