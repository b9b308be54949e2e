// Top-k search over an embeddings file: exactly, a block of rows at a time,
// or through the HNSW index (search.h).
#include "eval/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "console/error.h"
#include "console/interrupt.h"
#include "eval/sdr_scoring.h"

namespace docmatch::eval {
namespace {

constexpr int64_t kScoresPerPass = int64_t{1} << 24;  // float64: 128 MB

torch::Tensor Unit(const torch::Tensor& x) {
  namespace F = torch::nn::functional;
  return F::normalize(x.to(torch::kFloat64), F::NormalizeFuncOptions().dim(-1));
}

}  // namespace

Searcher::Searcher(const EmbeddingFile& file, model::DocumentModel* model, const LexicalIndex* lexical,
                   SearchOptions options, torch::Device device)
    : file_(file), model_(model), lexical_(lexical), options_(options), device_(device) {
  if (options_.top < 1) throw Error("search", "--top must be at least 1");
  if (!model_ && file_.kind() == "smash") {
    throw Error("search", "'" + file_.path() + "' holds SMASH vectors, scored by the model's pair head: pass --model");
  }
  if (model_ && model_->config().kind != file_.kind() && !file_.kind().empty()) {
    throw Error("search", "'" + file_.path() + "' holds " + file_.kind() + " vectors, but the model is " +
                              model_->config().kind + ": search with the model that embedded them");
  }
  if (model_ && model_->dimension() != file_.dimension()) {
    throw Error("search", "'" + file_.path() + "' holds " + std::to_string(file_.dimension()) +
                              "-d vectors, but the model makes " + std::to_string(model_->dimension()) + "-d ones");
  }
  cosine_ = !model_ || model_->cosine();
  if (options_.index && (!cosine_ || options_.lexical_weight > 0)) {
    throw Error("search", "--ann finds the nearest cosines; this search scores with " +
                              std::string(options_.lexical_weight > 0 ? "a lexical score fused in (--lexical-weight)"
                                                                      : "the model's pair head") +
                              ": search exactly");
  }
  if (options_.lexical_weight > 0) {
    if (!lexical_ && !options_.bm25) throw Error("search", "--lexical-weight needs the corpus's lexical index");
    if (!cosine_ || file_.has_sentences()) {
      throw Error("search", std::string("--lexical-weight fuses TF-IDF with a cosine of document vectors; ") +
                                (file_.score() == "maxsim"
                                     ? "this file re-ranks by MaxSim over windows (eval --lexical-weight fuses "
                                       "TF-IDF with MaxSim)"
                                     : "this model's score is not one"));
    }
    const int64_t documents = options_.bm25 ? options_.bm25->size() : lexical_->size();
    if (documents != file_.size()) {
      throw Error("search", "the corpus holds " + std::to_string(documents) + " documents and '" + file_.path() + "' " +
                                std::to_string(file_.size()) + " vectors: give the corpus the file was embedded from");
    }
  }
}

torch::Tensor Searcher::QueryVectors(const std::vector<SearchQuery>& queries,
                                     std::vector<model::DocumentSentences>* sentences) const {
  const size_t Q = queries.size();
  const bool with_sentences = file_.has_sentences();
  std::vector<torch::Tensor> rows(Q);
  std::vector<model::DocumentSentences> slots(with_sentences ? Q : 0);
  std::vector<size_t> text_at;  // the text queries, embedded batch_size at a time as embed does
  std::vector<const data::Document*> texts;
  for (size_t q = 0; q < Q; ++q) {
    const SearchQuery& query = queries[q];
    if (query.row >= 0) {
      rows[q] = file_.Vectors(query.row, query.row + 1)[0];
      if (!rows[q].ne(0).any().item<bool>()) {
        // No direction, so no cosine: every score would read 0 and the hits
        // come in file order (fuse refuses such a row too).
        throw Error("search", "document '" + query.label + "' has an all-zero vector in '" + file_.path() +
                                  "': it matches nothing; embed it again");
      }
      if (with_sentences) slots[q] = file_.Sentences(query.row, query.row + 1)[0];
      continue;
    }
    if (!model_) throw Error("search", "a text query needs the model that embedded the file: --model");
    if (query.text.num_tokens() == 0) throw Error("search", "query '" + query.label + "' has no text");
    text_at.push_back(q);
    texts.push_back(&query.text);
  }
  const size_t batch = static_cast<size_t>(std::max<int64_t>(1, options_.batch_size));
  for (size_t first = 0; first < texts.size(); first += batch) {
    const std::vector<const data::Document*> chunk(texts.begin() + first,
                                                   texts.begin() + std::min(texts.size(), first + batch));
    std::vector<model::DocumentSentences> got;
    const torch::Tensor vectors = DocumentVectors(*model_, chunk, device_, with_sentences ? &got : nullptr);
    if (with_sentences && got.size() != chunk.size()) {
      throw Error("search", "'" + file_.path() +
                                "' holds sentence vectors, and the model gives none: give the model that embedded it");
    }
    for (size_t i = 0; i < chunk.size(); ++i) {
      rows[text_at[first + i]] = vectors[static_cast<int64_t>(i)];
      if (with_sentences) slots[text_at[first + i]] = std::move(got[i]);
    }
  }
  for (auto& s : slots) sentences->push_back(std::move(s));
  const torch::Tensor vectors = torch::stack(rows);
  return cosine_ ? Unit(vectors) : vectors;
}

torch::Tensor Searcher::LexicalScores(const std::vector<SearchQuery>& queries) const {
  // One pass over the index for the document queries, one for the texts.
  std::vector<int64_t> rows, row_at, text_at;
  std::vector<std::vector<int32_t>> texts;
  std::vector<data::WordBag> bags;
  for (int64_t q = 0; q < static_cast<int64_t>(queries.size()); ++q) {
    if (queries[q].row >= 0) {
      rows.push_back(queries[q].row);
      row_at.push_back(q);
    } else {
      texts.push_back(queries[q].text.tokens);
      bags.push_back(queries[q].words);
      text_at.push_back(q);
    }
  }
  const Bm25Index* bm25 = options_.bm25;
  torch::Tensor scores =
      torch::empty({static_cast<int64_t>(queries.size()), bm25 ? bm25->size() : lexical_->size()}, torch::kFloat64);
  if (!rows.empty()) {
    scores.index_copy_(0, torch::tensor(row_at),
                       bm25 ? MinMaxPerQuery(bm25->Scores(rows), rows) : lexical_->Scores(rows));
  }
  if (!texts.empty()) {
    scores.index_copy_(0, torch::tensor(text_at),
                       bm25 ? MinMaxPerQuery(bm25->ScoresOfBags(bags), std::vector<int64_t>(bags.size(), -1))
                            : lexical_->ScoresOfTokens(texts));
  }
  return scores;
}

torch::Tensor Searcher::BlockScores(const torch::Tensor& queries, const torch::Tensor& lexical, int64_t begin,
                                    int64_t end) const {
  const torch::Tensor rows = file_.Vectors(begin, end);
  torch::Tensor scores;
  if (cosine_) {
    scores = torch::matmul(queries, Unit(rows).t());
  } else {
    torch::NoGradGuard no_grad;
    scores = model_->ScoreMatrix(queries, rows).to(torch::kFloat64);
  }
  if (lexical.defined()) {
    const double w = options_.lexical_weight;
    scores = (1 - w) * scores + w * lexical.slice(1, begin, end);
  }
  return scores;
}

std::vector<std::vector<SearchHit>> Searcher::ExactCandidates(const std::vector<SearchQuery>& batch,
                                                              const torch::Tensor& vectors,
                                                              const torch::Tensor& lexical, int64_t pool) const {
  const int64_t N = file_.size(), Q = static_cast<int64_t>(batch.size());
  // The running best `pool` of every query, merged with each block's best.
  torch::Tensor best_scores = torch::empty({Q, 0}, torch::kFloat64);
  torch::Tensor best_rows = torch::empty({Q, 0}, torch::kLong);
  for (int64_t begin = 0; begin < N; begin += options_.block_rows) {
    console::StopIfInterrupted();
    const int64_t end = std::min(N, begin + options_.block_rows);
    torch::Tensor scores = BlockScores(vectors, lexical, begin, end);
    if (options_.exclude_self) {
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t row = batch[q].row;
        if (row >= begin && row < end) scores[q][row - begin] = -std::numeric_limits<double>::infinity();
      }
    }
    auto [block_scores, block_rows] = scores.topk(std::min(pool, end - begin), 1);
    best_scores = torch::cat({best_scores, block_scores}, 1);
    best_rows = torch::cat({best_rows, block_rows + begin}, 1);
    auto [kept, order] = best_scores.topk(std::min(pool, best_scores.size(1)), 1);
    best_scores = kept;
    best_rows = best_rows.gather(1, order);
  }
  best_scores = best_scores.contiguous();
  best_rows = best_rows.contiguous();
  std::vector<std::vector<SearchHit>> candidates(Q);
  for (int64_t q = 0; q < Q; ++q) {
    const double* s = best_scores.data_ptr<double>() + q * best_scores.size(1);
    const int64_t* rows = best_rows.data_ptr<int64_t>() + q * best_rows.size(1);
    for (int64_t i = 0; i < best_scores.size(1); ++i) {
      if (std::isfinite(s[i])) candidates[q].push_back({rows[i], s[i]});
    }
  }
  return candidates;
}

std::vector<std::vector<SearchHit>> Searcher::IndexCandidates(const std::vector<SearchQuery>& batch,
                                                              const torch::Tensor& vectors, int64_t pool) const {
  std::vector<int64_t> skip;
  for (const SearchQuery& query : batch) skip.push_back(options_.exclude_self ? query.row : -1);
  const auto found = options_.index->Search(vectors, std::min(pool, file_.size()), options_.ef, skip);
  std::vector<std::vector<SearchHit>> candidates(found.size());
  for (size_t q = 0; q < found.size(); ++q) {
    for (const auto& [row, score] : found[q]) candidates[q].push_back({row, score});
  }
  return candidates;
}

std::vector<std::vector<SearchHit>> Searcher::Search(const std::vector<SearchQuery>& queries) const {
  const int64_t N = file_.size();
  const bool sdr = file_.has_sentences();
  const int64_t pool = sdr ? std::max(options_.top, options_.rerank) : options_.top;
  std::vector<std::vector<SearchHit>> results;
  // Queries per pass over the file: their scores against a block (or, when
  // hybrid, their TF-IDF cosines against the corpus) stay near kScoresPerPass
  // numbers, so a long query list reads the vectors few times.
  const int64_t columns = options_.lexical_weight > 0 ? N : std::min(N, options_.block_rows);
  const int64_t per_pass = std::max<int64_t>(1, kScoresPerPass / std::max<int64_t>(1, columns));
  for (size_t first = 0; first < queries.size(); first += per_pass) {
    const std::vector<SearchQuery> batch(queries.begin() + first,
                                         queries.begin() + std::min<size_t>(queries.size(), first + per_pass));
    const int64_t Q = static_cast<int64_t>(batch.size());
    std::vector<model::DocumentSentences> sentences;
    const torch::Tensor vectors = QueryVectors(batch, &sentences);
    const torch::Tensor lexical = options_.lexical_weight > 0 ? LexicalScores(batch) : torch::Tensor();
    std::vector<std::vector<SearchHit>> candidates =
        options_.index ? IndexCandidates(batch, vectors, pool) : ExactCandidates(batch, vectors, lexical, pool);
    for (int64_t q = 0; q < Q; ++q) {
      std::vector<SearchHit>& hits = candidates[q];
      if (sdr && !hits.empty()) {
        std::vector<model::DocumentSentences> documents;
        for (const SearchHit& hit : hits) documents.push_back(file_.Sentences(hit.row, hit.row + 1)[0]);
        const torch::Tensor hierarchical =
            SdrScores(sentences[q], documents, options_.sdr_normalize && file_.score() == "sdr")
                .to(torch::kFloat64)
                .contiguous();
        for (size_t i = 0; i < hits.size(); ++i) hits[i].score = hierarchical.data_ptr<double>()[i];
      }
      // Best first; exact ties (duplicate documents) in file order, as a
      // stable sort of the scores would give them.
      std::sort(hits.begin(), hits.end(), [](const SearchHit& a, const SearchHit& b) {
        return a.score != b.score ? a.score > b.score : a.row < b.row;
      });
      if (static_cast<int64_t>(hits.size()) > options_.top) hits.resize(options_.top);
      results.push_back(std::move(hits));
    }
  }
  return results;
}

}  // namespace docmatch::eval
