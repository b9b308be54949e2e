// BM25's inverted index against its formula written out per (query, document)
// in float64 as a dense count matrix, on bags written to a words.h5 and read
// back (data/corpus/word_counts.h).
#include "eval/bm25.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace docmatch::eval {
namespace {

// Bags with repeated, shared, rare and single-document words, and a document
// with no word at all.
std::vector<data::WordBag> Bags() {
  return {{{"cat", 2}, {"mat", 1}, {"the", 3}},
          {{"dog", 2}, {"cat", 1}, {"the", 2}, {"tree", 1}},
          {{"quantum", 2}, {"state", 1}},
          {},
          {{"tree", 4}, {"the", 1}, {"mat", 1}, {"grow", 1}},
          {{"the", 1}}};
}

TEST(Bm25, EqualsItsFormulaOverACountMatrixInFloat64) {
  const std::string dir = ::testing::TempDir() + "docmatch-bm25-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<data::WordBag> bags = Bags();
  {
    data::WordCountsWriter writer(dir + "/" + data::kWordsFile);
    for (const data::WordBag& bag : bags) writer.Add(bag);
    writer.Close();
  }
  auto words = std::make_shared<const data::WordCounts>(data::WordCounts::OfCorpus(dir, 6));
  EXPECT_THROW(data::WordCounts::Load(dir + "/" + data::kWordsFile, 7), std::runtime_error);  // another corpus's
  // The dense formulation: a (documents x words) count matrix over the words
  // in sorted order, and the formula per cell.
  std::map<std::string, int64_t> column;
  for (const data::WordBag& bag : bags)
    for (const auto& [word, count] : bag) column.emplace(word, 0);
  int64_t next = 0;
  for (auto& [word, c] : column) c = next++;
  const int64_t N = static_cast<int64_t>(bags.size()), W = next;
  std::vector<std::vector<double>> tf(N, std::vector<double>(W, 0));
  std::vector<double> length(N, 0);
  for (int64_t d = 0; d < N; ++d) {
    for (const auto& [word, count] : bags[d]) {
      tf[d][column[word]] = count;
      length[d] += count;
    }
  }
  double average = 0;
  for (double l : length) average += l / N;
  for (const auto& [k1, b] : std::vector<std::pair<double, double>>{{1.2, 0.75}, {0.9, 0.4}, {2.0, 0.0}, {0.0, 1.0}}) {
    const Bm25Index index(words, {k1, b});
    std::vector<int64_t> all(N);
    for (int64_t d = 0; d < N; ++d) all[d] = d;
    const torch::Tensor scores = index.Scores(all);
    const torch::Tensor bagged = index.ScoresOfBags(bags);
    for (int64_t q = 0; q < N; ++q) {
      for (int64_t d = 0; d < N; ++d) {
        double expected = 0;
        for (int64_t t = 0; t < W; ++t) {
          if (tf[q][t] == 0 || tf[d][t] == 0) continue;  // adds 0 (k1 = 0 would make it 0 / 0)
          double df = 0;
          for (int64_t e = 0; e < N; ++e) df += tf[e][t] > 0;
          const double idf = std::log(1 + (N - df + 0.5) / (df + 0.5));
          expected += tf[q][t] * idf * tf[d][t] / (tf[d][t] + k1 * (1 - b + b * length[d] / average));
        }
        EXPECT_NEAR(scores[q][d].item<double>(), expected, 1e-12) << "k1 " << k1 << " b " << b << " q " << q;
        EXPECT_NEAR(bagged[q][d].item<double>(), expected, 1e-12) << "k1 " << k1 << " b " << b << " q " << q;
        EXPECT_NEAR(index.Score(q, d), expected, 1e-12) << "k1 " << k1 << " b " << b << " q " << q << " d " << d;
      }
    }
  }
  // A word the corpus lacks adds nothing; a query of none scores 0 everywhere.
  const Bm25Index index(words, {});
  const torch::Tensor with_unknown = index.ScoresOfBags({{{"cat", 1}, {"zebra", 5}}, {{"zebra", 1}}});
  EXPECT_TRUE(torch::equal(with_unknown[0], index.ScoresOfBags({{{"cat", 1}}})[0]));
  EXPECT_EQ(with_unknown[1].abs().sum().item<double>(), 0);
  EXPECT_THROW(Bm25Index(words, {-1, 0.75}), std::runtime_error);
  EXPECT_THROW(Bm25Index(words, {1.2, 1.5}), std::runtime_error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace docmatch::eval
