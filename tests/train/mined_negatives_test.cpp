// TF-IDF-mined negatives against a brute-force second formulation: every
// document's cosine to the source one at a time (LexicalIndex::Score), sorted,
// with the exclusions applied by hand.
#include "train/mined_negatives.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "../data/test_corpus.h"

namespace docmatch::train {
namespace {

TEST(MinedNegatives, AreTheNearestUnlabelledDocumentsWithTheFiltersApplied) {
  const std::string dir = ::testing::TempDir() + "docmatch-mined-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  data::testing::WriteSyntheticCorpus(dir, {9, 8});
  const data::Corpus corpus(dir);
  const int64_t N = corpus.num_documents();
  const eval::LexicalIndex index(corpus, /*progress=*/false);
  // Related pairs (one given the other way round too), a labelled negative,
  // a source with two positives, and a source (3) first met as a target.
  const std::vector<data::LabelledPair> pairs = {{0, 3, 1},  {5, 0, 1}, {0, 7, 0}, {2, 9, 1},
                                                 {2, 11, 1}, {4, 6, 1}, {3, 8, 1}};
  for (const double margin : {-1.0, 0.0, 0.05}) {
    const int64_t count = 4;
    const MinedNegatives mined = MineLexicalNegatives(index, pairs, count, margin);
    EXPECT_EQ(mined.sources, 5);  // 0, 2, 3, 4, 5
    int64_t related = 0, above = 0;
    for (const int64_t source : {0, 2, 3, 4, 5}) {
      std::set<int64_t> positives;
      for (const auto& p : pairs) {
        if (p.label != 1) continue;
        if (p.source == source) positives.insert(p.target);
        if (p.target == source) positives.insert(p.source);
      }
      double best = 0;
      for (int64_t t : positives) best = std::max(best, index.Score(source, t));
      std::vector<int64_t> ranked;
      for (int64_t d = 0; d < N; ++d) ranked.push_back(d);
      std::stable_sort(ranked.begin(), ranked.end(),
                       [&](int64_t a, int64_t b) { return index.Score(source, a) > index.Score(source, b); });
      std::vector<int64_t> expected;
      for (int64_t d : ranked) {
        if (static_cast<int64_t>(expected.size()) == count) break;
        if (d == source) continue;
        if (positives.count(d)) {
          ++related;
        } else if (margin >= 0 && index.Score(source, d) > best + margin) {
          ++above;
        } else {
          expected.push_back(d);
        }
      }
      ASSERT_TRUE(mined.by_source.count(source)) << source;
      EXPECT_EQ(mined.by_source.at(source), expected) << "source " << source << ", margin " << margin;
      for (int64_t d : mined.by_source.at(source)) {
        EXPECT_NE(d, source);
        EXPECT_EQ(positives.count(d), 0u) << "a labelled positive was mined as a negative";
      }
    }
    EXPECT_EQ(mined.dropped_related, related) << margin;
    EXPECT_EQ(mined.dropped_margin, above) << margin;
    if (margin < 0) {
      EXPECT_EQ(mined.dropped_margin, 0);
    }
  }
  // Positives rank near their source in this corpus? Not assumed; but some
  // filter must have had work, or the test proves little.
  const MinedNegatives strict = MineLexicalNegatives(index, pairs, N, 0.0);
  EXPECT_GT(strict.dropped_related, 0);
  EXPECT_GT(strict.dropped_margin, 0);
  EXPECT_TRUE(MineLexicalNegatives(index, pairs, 0, 0.1).by_source.empty());
  std::filesystem::remove_all(dir);
}

// The model's own neighbours (finetune --refresh-negatives): the same rule
// over the cosine of document vectors, against a by-hand ranking in float64
// of cosines computed one pair at a time.
TEST(MinedNegatives, DenseNeighboursFollowTheSameRule) {
  torch::manual_seed(5);
  const int64_t N = 30;
  const torch::Tensor vectors = torch::randn({N, 6});
  const auto cosine = [&](int64_t a, int64_t b) {
    const torch::Tensor x = vectors[a].to(torch::kFloat64), y = vectors[b].to(torch::kFloat64);
    return (x.dot(y) / (x.norm() * y.norm())).item<double>();
  };
  const std::vector<data::LabelledPair> pairs = {{0, 3, 1}, {5, 0, 1}, {2, 9, 1}, {4, 6, 0}};
  for (const double margin : {-1.0, 0.0}) {
    const MinedNegatives mined = MineDenseNegatives(vectors, pairs, 5, margin);
    EXPECT_EQ(mined.sources, 3);  // 0, 2, 5
    for (const int64_t source : {0, 2, 5}) {
      std::set<int64_t> positives;
      for (const auto& p : pairs) {
        if (p.label != 1) continue;
        if (p.source == source) positives.insert(p.target);
        if (p.target == source) positives.insert(p.source);
      }
      double best = -1;
      for (int64_t t : positives) best = std::max(best, cosine(source, t));
      std::vector<int64_t> ranked(N);
      for (int64_t d = 0; d < N; ++d) ranked[d] = d;
      std::stable_sort(ranked.begin(), ranked.end(),
                       [&](int64_t a, int64_t b) { return cosine(source, a) > cosine(source, b); });
      std::vector<int64_t> expected;
      for (int64_t d : ranked) {
        if (expected.size() == 5) break;
        if (d == source || positives.count(d) || (margin >= 0 && cosine(source, d) > best + margin)) continue;
        expected.push_back(d);
      }
      EXPECT_EQ(mined.by_source.at(source), expected) << "source " << source << ", margin " << margin;
    }
  }
  // With margin 0 something nearer than a positive exists here: the filter works.
  EXPECT_GT(MineDenseNegatives(vectors, pairs, N, 0.0).dropped_margin, 0);
}

}  // namespace
}  // namespace docmatch::train
