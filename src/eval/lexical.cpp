// Sparse TF-IDF vectors of a corpus and their cosines (lexical.h).
#include "eval/lexical.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include <ATen/Parallel.h>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"

namespace docmatch::eval {

LexicalIndex::LexicalIndex(const data::Corpus& corpus, bool progress) {
  const int64_t N = corpus.num_documents();
  vocab_ = corpus.manifest().vocab_size;
  console::ProgressBar bar("[eval] TF-IDF index", N, "docs", "", progress);
  // Pass 1: each document's distinct tokens with their counts; document frequencies.
  df_.assign(vocab_, 0);
  std::vector<int64_t> counts;  // parallel to columns_ until the weights replace them
  row_begin_.assign(1, 0);
  std::vector<int32_t> tokens;
  for (int64_t d = 0; d < N; ++d) {
    tokens = corpus.Get(d).tokens;
    std::sort(tokens.begin(), tokens.end());
    for (size_t i = 0; i < tokens.size();) {
      size_t j = i;
      while (j < tokens.size() && tokens[j] == tokens[i]) ++j;
      DOCMATCH_CHECK(tokens[i] >= 0 && tokens[i] < vocab_, "eval", "document ", corpus.Get(d).id, " holds token id ",
                     tokens[i], " outside the corpus vocabulary of ", vocab_);
      columns_.push_back(tokens[i]);
      counts.push_back(static_cast<int64_t>(j - i));
      ++df_[tokens[i]];
      i = j;
    }
    row_begin_.push_back(static_cast<int64_t>(columns_.size()));
    bar.Add(1);
  }
  bar.Finish();
  // Pass 2: weights, normalised per row.
  values_.resize(columns_.size());
  for (int64_t d = 0; d < N; ++d) {
    double norm = 0;
    for (int64_t k = row_begin_[d]; k < row_begin_[d + 1]; ++k) {
      values_[k] = (1.0 + std::log(static_cast<double>(counts[k]))) * Idf(columns_[k]);
      norm += values_[k] * values_[k];
    }
    norm = std::sqrt(norm);
    for (int64_t k = row_begin_[d]; k < row_begin_[d + 1]; ++k) values_[k] /= norm > 0 ? norm : 1.0;
  }
}

torch::Tensor LexicalIndex::Scores(const std::vector<int64_t>& queries) const {
  const int64_t N = size();
  for (const int64_t doc : queries)
    DOCMATCH_CHECK(doc >= 0 && doc < N, "eval", "no document ", doc, " in the TF-IDF index");
  return Against(static_cast<int64_t>(queries.size()), [&](int64_t q, const std::function<void(int64_t, double)>& put) {
    const int64_t doc = queries[q];
    for (int64_t k = row_begin_[doc]; k < row_begin_[doc + 1]; ++k) put(columns_[k], values_[k]);
  });
}

torch::Tensor LexicalIndex::ScoresOfTokens(const std::vector<std::vector<int32_t>>& texts) const {
  // Each text's TF-IDF vector with the corpus's idf (a token the corpus never
  // saw has no weight: it matches nothing), normalised.
  std::vector<std::vector<std::pair<int64_t, double>>> rows(texts.size());
  for (size_t q = 0; q < texts.size(); ++q) {
    std::vector<int32_t> tokens = texts[q];
    std::sort(tokens.begin(), tokens.end());
    double norm = 0;
    for (size_t i = 0; i < tokens.size();) {
      size_t j = i;
      while (j < tokens.size() && tokens[j] == tokens[i]) ++j;
      DOCMATCH_CHECK(tokens[i] >= 0 && tokens[i] < vocab_, "eval", "token id ", tokens[i],
                     " is outside the corpus vocabulary of ", vocab_);
      if (df_[tokens[i]] > 0) {
        const double w = (1.0 + std::log(static_cast<double>(j - i))) * Idf(tokens[i]);
        rows[q].emplace_back(tokens[i], w);
        norm += w * w;
      }
      i = j;
    }
    norm = std::sqrt(norm);
    for (auto& entry : rows[q]) entry.second /= norm;
  }
  return Against(static_cast<int64_t>(texts.size()), [&](int64_t q, const std::function<void(int64_t, double)>& put) {
    for (const auto& [token, weight] : rows[q]) put(token, weight);
  });
}

double LexicalIndex::Idf(int64_t token) const {
  return std::log((1.0 + static_cast<double>(size())) / (1.0 + static_cast<double>(df_[token]))) + 1.0;
}

torch::Tensor LexicalIndex::Against(
    int64_t Q, const std::function<void(int64_t, const std::function<void(int64_t, double)>&)>& query_row) const {
  const int64_t N = size();
  constexpr int64_t kColumns = 64;  // queries per pass: a dense (V, 64) block of their weights
  torch::Tensor scores = torch::zeros({Q, N}, torch::kFloat64);
  double* out = scores.data_ptr<double>();
  std::vector<double> dense;
  for (int64_t begin = 0; begin < Q; begin += kColumns) {
    console::StopIfInterrupted();
    const int64_t n = std::min(kColumns, Q - begin);
    dense.assign(static_cast<size_t>(vocab_ * n), 0.0);  // (V, n): token t of query q at t * n + q
    for (int64_t q = 0; q < n; ++q) {
      query_row(begin + q, [&](int64_t token, double weight) { dense[token * n + q] = weight; });
    }
    // Each document's sparse row against the block's queries.
    at::parallel_for(0, N, 64, [&](int64_t first, int64_t last) {
      std::vector<double> row(n);
      for (int64_t d = first; d < last; ++d) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t k = row_begin_[d]; k < row_begin_[d + 1]; ++k) {
          const double w = values_[k];
          const double* column = dense.data() + columns_[k] * n;
          for (int64_t q = 0; q < n; ++q) row[q] += w * column[q];
        }
        for (int64_t q = 0; q < n; ++q) out[(begin + q) * N + d] = row[q];
      }
    });
  }
  return scores;  // (Q, N)
}

double LexicalIndex::Score(int64_t a, int64_t b) const {
  double dot = 0;
  int64_t i = row_begin_[a], j = row_begin_[b];
  while (i < row_begin_[a + 1] && j < row_begin_[b + 1]) {
    if (columns_[i] < columns_[j]) {
      ++i;
    } else if (columns_[j] < columns_[i]) {
      ++j;
    } else {
      dot += values_[i++] * values_[j++];
    }
  }
  return dot;
}

}  // namespace docmatch::eval
