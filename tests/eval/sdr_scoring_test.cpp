// SDR's hierarchical score against an independent float64 computation.
#include "eval/sdr_scoring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace docmatch::eval {
namespace {

using Matrix = std::vector<std::vector<double>>;

double Cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], na += a[i] * a[i], nb += b[i] * b[i];
  return dot / std::sqrt(na * nb);
}

struct Doc {
  Matrix sentences;
  std::vector<int64_t> paragraphs;  // offsets
};

// The paper's recipe, written out with loops.
std::vector<double> Reference(const Doc& source, const std::vector<Doc>& candidates, bool normalize) {
  const size_t Ps = source.paragraphs.size() - 1;
  std::vector<Matrix> matrices;
  for (const Doc& c : candidates) {
    Matrix m(Ps, std::vector<double>(c.paragraphs.size() - 1));
    for (size_t p = 0; p < Ps; ++p) {
      for (size_t q = 0; q + 1 < c.paragraphs.size(); ++q) {
        double sum = 0;
        for (int64_t i = source.paragraphs[p]; i < source.paragraphs[p + 1]; ++i) {
          double best = -2;
          for (int64_t j = c.paragraphs[q]; j < c.paragraphs[q + 1]; ++j) {
            best = std::max(best, Cosine(source.sentences[i], c.sentences[j]));
          }
          sum += best;
        }
        m[p][q] = sum / (source.paragraphs[p + 1] - source.paragraphs[p]);
      }
    }
    matrices.push_back(m);
  }
  if (normalize) {
    for (size_t p = 0; p < Ps; ++p) {
      double sum = 0, squares = 0, n = 0;
      for (const auto& m : matrices) {
        for (double v : m[p]) sum += v, squares += v * v, ++n;
      }
      const double mean = sum / n, sd = std::sqrt(std::max(squares / n - mean * mean, 0.0));
      for (auto& m : matrices) {
        for (double& v : m[p]) v = (v - mean) / sd;
      }
    }
  }
  std::vector<double> scores;
  for (const auto& m : matrices) {
    double sum = 0;
    for (const auto& row : m) sum += *std::max_element(row.begin(), row.end());
    scores.push_back(sum / Ps);
  }
  return scores;
}

SentenceVectors ToVectors(const Doc& d) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(d.sentences.size()), 3}, torch::kFloat64);
  for (size_t i = 0; i < d.sentences.size(); ++i) t[i] = torch::tensor(d.sentences[i], torch::kFloat64);
  return {t, d.paragraphs};
}

Doc RandomDoc(std::mt19937* rng, int paragraphs) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> sentences(1, 3);
  Doc d;
  d.paragraphs = {0};
  for (int p = 0; p < paragraphs; ++p) {
    const int n = sentences(*rng);
    for (int s = 0; s < n; ++s) d.sentences.push_back({normal(*rng), normal(*rng), normal(*rng)});
    d.paragraphs.push_back(d.paragraphs.back() + n);
  }
  return d;
}

TEST(SdrScores, EqualTheWrittenOutRecipeWithAndWithoutNormalisation) {
  std::mt19937 rng(4);
  const Doc source = RandomDoc(&rng, 3);
  std::vector<Doc> candidates;
  for (int c = 0; c < 5; ++c) candidates.push_back(RandomDoc(&rng, 1 + c % 3));
  std::vector<SentenceVectors> vectors;
  for (const auto& c : candidates) vectors.push_back(ToVectors(c));
  for (bool normalize : {false, true}) {
    const std::vector<double> expected = Reference(source, candidates, normalize);
    const torch::Tensor scores = SdrScores(ToVectors(source), vectors, normalize);
    ASSERT_EQ(scores.size(0), 5);
    for (int c = 0; c < 5; ++c) EXPECT_NEAR(scores[c].item<double>(), expected[c], 1e-9) << normalize << " " << c;
  }
}

TEST(SdrScores, NormalisationWeighsParagraphsByHowTheyVaryAcrossCandidates) {
  // Source paragraphs: {e0} and {e1}. Each candidate is one sentence v with
  // cos(e0, v) = x and cos(e1, v) = y. Paragraph 0 spreads widely over the
  // candidates (x = .9 .5 .1 .5), paragraph 1 narrowly (y = .30 .45 .30 .30).
  // Raw means prefer A (.60 vs .475); z-scores weigh B's clear win on the
  // narrow paragraph more: B (.87) over A (.42).
  auto candidate = [](double x, double y) { return Doc{{{x, y, std::sqrt(1 - x * x - y * y)}}, {0, 1}}; };
  const Doc source{{{1, 0, 0}, {0, 1, 0}}, {0, 1, 2}};
  const std::vector<Doc> docs = {candidate(0.9, 0.3), candidate(0.5, 0.45), candidate(0.1, 0.3), candidate(0.5, 0.3)};
  std::vector<SentenceVectors> candidates;
  for (const auto& d : docs) candidates.push_back(ToVectors(d));
  const torch::Tensor raw = SdrScores(ToVectors(source), candidates, false);
  const torch::Tensor normalised = SdrScores(ToVectors(source), candidates, true);
  EXPECT_NEAR(raw[0].item<double>(), 0.6, 1e-9);
  EXPECT_NEAR(raw[1].item<double>(), 0.475, 1e-9);
  EXPECT_NEAR(normalised[0].item<double>(), (std::sqrt(2.0) - 0.0375 / std::sqrt(0.0042187500)) / 2, 1e-6);
  EXPECT_GT(normalised[1].item<double>(), normalised[0].item<double>());
}

TEST(SentencePool, ScoresEachSourceAsTheRecipeAndLeavesAnExcludedCandidateOutOfTheZScore) {
  // One pool for many sources, as a ranking uses it: each source's scores
  // equal the written-out recipe over the whole pool, and with a candidate
  // excluded, the other candidates' scores equal the recipe over the pool
  // without it (a query ranked against the rest of its own corpus).
  std::mt19937 rng(12);
  std::vector<Doc> docs;
  for (int c = 0; c < 7; ++c) docs.push_back(RandomDoc(&rng, 1 + c % 3));
  std::vector<SentenceVectors> vectors;
  for (const auto& d : docs) vectors.push_back(ToVectors(d));
  const SentencePool pool(vectors);
  ASSERT_EQ(pool.size(), 7);
  for (int s = 0; s < 3; ++s) {
    const Doc source = RandomDoc(&rng, 1 + s);
    for (bool normalize : {false, true}) {
      const std::vector<double> whole = Reference(source, docs, normalize);
      const torch::Tensor scores = pool.Scores(ToVectors(source), normalize);
      for (int c = 0; c < 7; ++c) EXPECT_NEAR(scores[c].item<double>(), whole[c], 1e-9) << s << normalize << c;
      for (int excluded : {0, 4}) {
        std::vector<Doc> rest = docs;
        rest.erase(rest.begin() + excluded);
        const std::vector<double> expected = Reference(source, rest, normalize);
        const torch::Tensor got = pool.Scores(ToVectors(source), normalize, excluded);
        for (int c = 0, r = 0; c < 7; ++c) {
          if (c == excluded) continue;
          EXPECT_NEAR(got[c].item<double>(), expected[r++], 1e-9) << s << normalize << c << " without " << excluded;
        }
      }
    }
  }
  // Many sources in one call (one matrix product, each source's rows cut
  // out of it) give each source's own scores.
  std::vector<Doc> sources;
  for (int s = 0; s < 4; ++s) sources.push_back(RandomDoc(&rng, 1 + s % 3));
  std::vector<SentenceVectors> source_vectors;
  for (const auto& d : sources) source_vectors.push_back(ToVectors(d));
  std::vector<const SentenceVectors*> pointers;
  for (const auto& v : source_vectors) pointers.push_back(&v);
  const std::vector<int64_t> exclude = {0, 3, 6, 1};
  for (bool normalize : {false, true}) {
    const std::vector<torch::Tensor> batch = pool.Scores(pointers, normalize, exclude);
    ASSERT_EQ(batch.size(), 4u);
    for (int s = 0; s < 4; ++s) {
      std::vector<Doc> rest = docs;
      rest.erase(rest.begin() + exclude[s]);
      const std::vector<double> expected = Reference(sources[s], rest, normalize);
      for (int c = 0, r = 0; c < 7; ++c) {
        if (c == exclude[s]) continue;
        EXPECT_NEAR(batch[s][c].item<double>(), expected[r++], 1e-9) << "batched " << s << c;
      }
    }
  }
  // Excluding changes the z-scored scores (the statistics lose a candidate), not the raw ones.
  const Doc source = RandomDoc(&rng, 3);
  EXPECT_FALSE(torch::allclose(pool.Scores(ToVectors(source), true), pool.Scores(ToVectors(source), true, 0)));
  EXPECT_TRUE(torch::equal(pool.Scores(ToVectors(source), false), pool.Scores(ToVectors(source), false, 0)));
}

TEST(SdrPairScore, AOneParagraphTargetIsScoredAmongThePoolNotAlone) {
  // Scored alone, a one-paragraph target's normalised score is exactly 0
  // (each source paragraph has one candidate paragraph: no spread), whatever
  // it says. Among a pool it is the recipe's z-scored value, and a target
  // close to the source outscores one far from it.
  std::mt19937 rng(9);
  const Doc source = RandomDoc(&rng, 3);
  std::vector<Doc> pool_docs;
  for (int c = 0; c < 6; ++c) pool_docs.push_back(RandomDoc(&rng, 1 + c % 3));
  std::vector<SentenceVectors> pool;
  for (const auto& d : pool_docs) pool.push_back(ToVectors(d));
  const Doc close{{source.sentences[0], source.sentences[1]}, {0, 2}};
  const Doc far{{{-source.sentences[0][0], -source.sentences[0][1], -source.sentences[0][2]}}, {0, 1}};
  for (const Doc& target : {close, far}) {
    EXPECT_DOUBLE_EQ(SdrPairScore(ToVectors(source), ToVectors(target), {}, true), 0.0);
    std::vector<Doc> all = pool_docs;
    all.push_back(target);
    const double expected = Reference(source, all, true).back();
    EXPECT_NEAR(SdrPairScore(ToVectors(source), ToVectors(target), pool, true), expected, 1e-9);
    EXPECT_NE(expected, 0.0);
    // Unnormalised, the pool changes nothing.
    EXPECT_NEAR(SdrPairScore(ToVectors(source), ToVectors(target), pool, false), Reference(source, {target}, false)[0],
                1e-9);
  }
  EXPECT_GT(SdrPairScore(ToVectors(source), ToVectors(close), pool, true),
            SdrPairScore(ToVectors(source), ToVectors(far), pool, true));
}

}  // namespace
}  // namespace docmatch::eval
