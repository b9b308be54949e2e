// What fine-tuning draws (train/finetune_batches.h): each epoch's order is a
// permutation, the same for the same seed and epoch; a source's hard
// negatives are its labelled ones then the mined ones, each once; a draw
// keys on (seed, epoch, pair) alone, so a pair's negatives are the same on
// whichever rank, in whatever order, it is drawn.
#include "train/finetune_batches.h"

#include <gtest/gtest.h>

#include <set>

namespace docmatch::train {
namespace {

std::vector<data::LabelledPair> Pairs() {
  // Source 0: related to 1, labelled negatives 5 and 6; source 2: related to 3.
  return {{0, 1, 1.0f}, {0, 5, 0.0f}, {0, 6, 0.0f}, {2, 3, 1.0f}, {4, 4, 1.0f}};
}

TEST(FinetuneBatches, EpochOrderIsAPermutationKeyedBySeedAndEpoch) {
  const std::vector<int64_t> order = EpochOrder(50, /*seed=*/7, /*epoch=*/0);
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 50u);
  EXPECT_EQ(*std::max_element(order.begin(), order.end()), 49);
  EXPECT_EQ(EpochOrder(50, 7, 0), order);
  EXPECT_NE(EpochOrder(50, 7, 1), order);
  EXPECT_NE(EpochOrder(50, 8, 0), order);
}

TEST(FinetuneBatches, RelatedKeepsTheLabelledOnesInOrder) {
  const std::vector<data::LabelledPair> related = Related(Pairs());
  ASSERT_EQ(related.size(), 3u);
  EXPECT_EQ(related[0].target, 1);
  EXPECT_EQ(related[1].source, 2);
  EXPECT_EQ(related[2].source, 4);
}

TEST(FinetuneBatches, HardNegativesAreTheLabelledThenTheMinedEachOnce) {
  HardNegatives hard(Pairs());
  const auto pool = [&](int64_t source) {
    const std::vector<int64_t> all = hard.Draw(source, /*count=*/100, /*seed=*/1, /*epoch=*/0, /*pair=*/0);
    return std::set<int64_t>(all.begin(), all.end());
  };
  EXPECT_EQ(pool(0), (std::set<int64_t>{5, 6}));
  EXPECT_TRUE(pool(2).empty());
  hard.SetMined({{0, {6, 7}}, {2, {9}}});
  EXPECT_EQ(hard.Draw(0, 100, 1, 0, 0).size(), 3u);  // 6 once
  EXPECT_EQ(pool(0), (std::set<int64_t>{5, 6, 7}));
  EXPECT_EQ(pool(2), (std::set<int64_t>{9}));
  hard.SetMined({{0, {8}}});  // in place of the earlier mined ones
  EXPECT_EQ(pool(0), (std::set<int64_t>{5, 6, 8}));
  EXPECT_TRUE(pool(2).empty());
}

TEST(FinetuneBatches, ADrawKeysOnSeedEpochAndPairAlone) {
  std::vector<data::LabelledPair> pairs;
  for (int64_t n = 10; n < 30; ++n) pairs.push_back({0, n, 0.0f});
  HardNegatives hard(pairs);
  const std::vector<int64_t> first = hard.Draw(0, 4, /*seed=*/3, /*epoch=*/2, /*pair=*/17);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(std::set<int64_t>(first.begin(), first.end()).size(), 4u);
  hard.Draw(0, 4, 3, 2, 5);  // another pair drawn in between changes nothing
  EXPECT_EQ(hard.Draw(0, 4, 3, 2, 17), first);
  EXPECT_EQ(HardNegatives(pairs).Draw(0, 4, 3, 2, 17), first);  // another process, the same draw
  // Another pair, epoch or seed draws otherwise (20 choose 4 ways: a clash
  // of all three would be a broken key, not chance).
  EXPECT_FALSE(hard.Draw(0, 4, 3, 2, 18) == first && hard.Draw(0, 4, 3, 3, 17) == first &&
               hard.Draw(0, 4, 4, 2, 17) == first);
  EXPECT_TRUE(hard.Draw(0, 0, 3, 2, 17).empty());
}

TEST(FinetuneBatches, DrawPairsFollowsTheOrderAndDrawsEachPairsNegatives) {
  const std::vector<data::LabelledPair> pairs = Pairs();
  const HardNegatives hard(pairs);
  const std::vector<int64_t> order = {3, 0, 4};
  const PairDocuments drawn = DrawPairs(pairs, order, 0, 3, hard, /*hard_count=*/1, /*seed=*/9, /*epoch=*/1);
  EXPECT_EQ(drawn.sources, (std::vector<int64_t>{2, 0, 4}));
  EXPECT_EQ(drawn.targets, (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(drawn.negatives, hard.Draw(0, 1, 9, 1, /*pair=*/0));  // only source 0 has negatives
  std::vector<int64_t> all = drawn.sources;
  all.insert(all.end(), drawn.targets.begin(), drawn.targets.end());
  all.insert(all.end(), drawn.negatives.begin(), drawn.negatives.end());
  EXPECT_EQ(drawn.All(), all);
}

}  // namespace
}  // namespace docmatch::train
