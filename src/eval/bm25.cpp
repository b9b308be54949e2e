// BM25's inverted index and scores (bm25.h).
#include "eval/bm25.h"

#include <cmath>

#include "console/error.h"

namespace docmatch::eval {

Bm25Index::Bm25Index(std::shared_ptr<const data::WordCounts> words, Bm25Parameters parameters)
    : words_(std::move(words)), parameters_(parameters) {
  DOCMATCH_CHECK(std::isfinite(parameters_.k1) && parameters_.k1 >= 0, "eval",
                 "BM25's k1 is a number of 0 or more, not ", parameters_.k1);
  DOCMATCH_CHECK(std::isfinite(parameters_.b) && parameters_.b >= 0 && parameters_.b <= 1, "eval",
                 "BM25's b is a share in [0, 1], not ", parameters_.b);
  const data::WordCounts& w = *words_;
  const int64_t N = w.num_documents(), W = w.vocabulary_size();
  // Document frequencies, then each word's postings by a counting sort of
  // the (document, word) entries: documents stay ascending within a word.
  std::vector<int64_t> df(W, 0);
  for (const int32_t term : w.terms()) ++df[term];
  word_begin_.assign(W + 1, 0);
  for (int64_t t = 0; t < W; ++t) word_begin_[t + 1] = word_begin_[t] + df[t];
  double total_length = 0;
  for (int64_t d = 0; d < N; ++d) total_length += static_cast<double>(w.length(d));
  const double average = N > 0 ? total_length / static_cast<double>(N) : 0;
  post_document_.resize(w.terms().size());
  post_part_.resize(w.terms().size());
  std::vector<int64_t> next(word_begin_.begin(), word_begin_.end() - 1);
  const double k1 = parameters_.k1, b = parameters_.b;
  norm_.resize(N);
  for (int64_t d = 0; d < N; ++d) {
    norm_[d] = k1 * (1 - b + (average > 0 ? b * static_cast<double>(w.length(d)) / average : 0));
    for (int64_t e = w.begin(d); e < w.end(d); ++e) {
      const double tf = w.counts()[e];
      const int64_t at = next[w.terms()[e]]++;
      post_document_[at] = static_cast<int32_t>(d);
      post_part_[at] = tf / (tf + norm_[d]);
    }
  }
  idf_.resize(W);
  for (int64_t t = 0; t < W; ++t) {
    idf_[t] = std::log(1 + (static_cast<double>(N - df[t]) + 0.5) / (static_cast<double>(df[t]) + 0.5));
  }
}

void Bm25Index::AddWord(int32_t word, double weight, double* row) const {
  for (int64_t p = word_begin_[word]; p < word_begin_[word + 1]; ++p) row[post_document_[p]] += weight * post_part_[p];
}

torch::Tensor Bm25Index::Scores(const std::vector<int64_t>& queries) const {
  const data::WordCounts& w = *words_;
  torch::Tensor scores = torch::zeros({static_cast<int64_t>(queries.size()), size()}, torch::kFloat64);
  for (size_t q = 0; q < queries.size(); ++q) {
    double* row = scores[static_cast<int64_t>(q)].data_ptr<double>();
    for (int64_t e = w.begin(queries[q]); e < w.end(queries[q]); ++e) {
      AddWord(w.terms()[e], w.counts()[e] * idf_[w.terms()[e]], row);
    }
  }
  return scores;
}

double Bm25Index::Score(int64_t query, int64_t document) const {
  const data::WordCounts& w = *words_;
  double score = 0;
  int64_t a = w.begin(query), b = w.begin(document);
  while (a < w.end(query) && b < w.end(document)) {
    const int32_t ta = w.terms()[a], tb = w.terms()[b];
    if (ta < tb) {
      ++a;
    } else if (tb < ta) {
      ++b;
    } else {
      const double tf = w.counts()[b];
      score += w.counts()[a] * idf_[ta] * (tf / (tf + norm_[document]));
      ++a;
      ++b;
    }
  }
  return score;
}

torch::Tensor Bm25Index::ScoresOfBags(const std::vector<data::WordBag>& bags) const {
  torch::Tensor scores = torch::zeros({static_cast<int64_t>(bags.size()), size()}, torch::kFloat64);
  for (size_t q = 0; q < bags.size(); ++q) {
    double* row = scores[static_cast<int64_t>(q)].data_ptr<double>();
    for (const auto& [word, count] : bags[q]) {
      if (const std::optional<int32_t> id = words_->Id(word)) AddWord(*id, count * idf_[*id], row);
    }
  }
  return scores;
}

torch::Tensor MinMaxPerQuery(torch::Tensor rows, const std::vector<int64_t>& self) {
  for (int64_t q = 0; q < rows.size(0); ++q) {
    torch::Tensor row = rows[q];
    const torch::Tensor others = self[q] >= 0 ? row.index({torch::arange(row.numel()).ne(self[q])}) : row;
    if (others.numel() == 0) continue;
    const double low = others.min().item<double>(), high = others.max().item<double>();
    if (high > low) {
      row.sub_(low).div_(high - low);
    } else {
      row.zero_();
    }
  }
  return rows;
}

}  // namespace docmatch::eval
