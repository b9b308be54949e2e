// `eval`: threshold chosen on valid and applied to test, ranking of every query
// against the corpus sharded over ranks, results as JSON (evaluate.h).
#include "eval/evaluate.h"

#include <glog/logging.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <numeric>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/batches/pairs.h"
#include "data/corpus/corpus.h"
#include "data/corpus/random.h"
#include "eval/embeddings.h"
#include "eval/lexical.h"
#include "eval/metrics.h"
#include "eval/sdr_scoring.h"
#include "files/file_writer.h"
#include "io/model_folder.h"
#include "model/losses.h"

namespace docmatch::eval {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMaxSim = "maxsim over windows";
constexpr const char* kWindowsMean = "cosine of the windows' mean (--windows-mean, not MaxSim)";
// Up to this many candidates a query's BM25 scores are merges of two
// documents' words; above, one pass over the query words' postings.
constexpr int64_t kBm25PairsByMerge = 64;

// Everything a score needs: the model (pair head) and every document's
// vectors, or its sentence vectors for SDR's hierarchical score (and, with
// one paragraph a document and no z-score, for MaxSim over a MatchBERT's
// windows: sdr_scoring.h). Without a model (vectors made elsewhere) the score
// is the cosine, or MaxSim where the file holds windows.
struct Scorer {
  model::DocumentModel* model = nullptr;                 // null: cosine
  torch::Tensor vectors;                                 // (N, D)
  std::vector<model::DocumentSentences> sdr;             // (N,) SDR only
  std::shared_ptr<const SentencePool> corpus_sentences;  // sdr prepared once for rankings (UseSentences)
  bool normalize = false;
  std::vector<int64_t> sdr_pool;          // SDR pairs: a seeded sample, pool_size + 2 long (or the whole file)
  size_t pool_size = 0;                   // documents a pair's target is scored among
  const LexicalIndex* lexical = nullptr;  // hybrid: (1 - w) * dense cosine + w * TF-IDF cosine
  const Bm25Index* bm25 = nullptr;        // or (1 - w) * dense cosine + w * BM25 normalised per query
  // Each query's BM25 (min, max) over the other documents, as Blend finds them.
  std::shared_ptr<std::unordered_map<int64_t, std::pair<double, double>>> bm25_ranges =
      std::make_shared<std::unordered_map<int64_t, std::pair<double, double>>>();
  double lexical_weight = 0;             // w
  std::string dense_name, lexical_name;  // the two sides' names in a hybrid's

  // The hybrid score's name at the current weight.
  std::string HybridName() const {
    std::ostringstream name;
    name << "hybrid: " << (1 - lexical_weight) << " x " << dense_name << " + " << lexical_weight << " x "
         << lexical_name;
    return name.str();
  }
  // eval --queries: the queries are documents of their own corpus, ranked
  // against every document of `vectors` (the candidates), none left out.
  torch::Tensor query_vectors;                      // (Q, D)
  std::vector<model::DocumentSentences> query_sdr;  // (Q,) SDR only
  const data::Corpus* query_corpus = nullptr;       // their tokens, for the TF-IDF side
  const data::WordCounts* query_words = nullptr;    // their words, for BM25

  bool separate_queries() const { return query_vectors.defined(); }
  bool hybrid() const { return lexical != nullptr || bm25 != nullptr; }

  // The BM25 side (Q, N) of --queries' documents, from their own words.
  torch::Tensor Bm25OfQueries(const std::vector<int64_t>& queries) const {
    std::vector<data::WordBag> bags;
    for (int64_t q : queries) {
      data::WordBag bag;
      for (int64_t e = query_words->begin(q); e < query_words->end(q); ++e)
        bag.emplace_back(query_words->word(query_words->terms()[e]), query_words->counts()[e]);
      bags.push_back(std::move(bag));
    }
    return MinMaxPerQuery(bm25->ScoresOfBags(bags), std::vector<int64_t>(queries.size(), -1));
  }

  bool hierarchical() const { return !sdr.empty(); }
  void UseSentences(std::vector<model::DocumentSentences> documents) {
    sdr = std::move(documents);
    corpus_sentences = sdr.empty() ? nullptr : std::make_shared<const SentencePool>(sdr);
  }
  // One pair's score; SDR's normalised score among the pool (sdr_scoring.h).
  double PairScore(int64_t source, int64_t target) const {
    if (hierarchical() && normalize && !sdr_pool.empty()) {
      std::vector<model::DocumentSentences> pool;
      for (int64_t d : sdr_pool) {
        if (pool.size() == pool_size) break;
        if (d != source && d != target) pool.push_back(sdr[d]);  // never the pair's own documents
      }
      return SdrPairScore(sdr[source], sdr[target], pool, true);
    }
    return Scores(source, torch::tensor({target}, torch::kLong))[0].item<double>();
  }
  // Scores (candidates,) of document `query` against `candidates`.
  torch::Tensor Scores(int64_t query, const torch::Tensor& candidates) const {
    if (hierarchical()) {
      std::vector<model::DocumentSentences> pool;
      const auto* index = candidates.data_ptr<int64_t>();
      for (int64_t i = 0; i < candidates.numel(); ++i) pool.push_back(sdr[index[i]]);
      return Blend(SdrScores(sdr[query], pool, normalize), query, candidates);
    }
    return Blend(Matrix(vectors[query].unsqueeze(0), vectors.index_select(0, candidates)).squeeze(0), query,
                 candidates);
  }
  // Dense scores (candidates,) of `query`, with TF-IDF blended in when hybrid.
  torch::Tensor Blend(torch::Tensor scores, int64_t query, const torch::Tensor& candidates) const {
    if (bm25) {
      // The query's range over the other documents, found once per query (a
      // pair's score must not cost a whole row each time), then each
      // candidate's own score.
      torch::Tensor row;  // the query's row, one pass of postings, when needed
      auto [range, added] = bm25_ranges->try_emplace(query, 0.0, 0.0);
      if (added) {
        row = bm25->Scores({query})[0];
        const torch::Tensor others = row.index({torch::arange(row.numel()).ne(query)});
        if (others.numel() > 0) range->second = {others.min().item<double>(), others.max().item<double>()};
      }
      const auto [low, high] = range->second;
      torch::Tensor words;
      if (candidates.numel() > kBm25PairsByMerge) {  // many candidates: from the query's row
        if (!row.defined()) row = bm25->Scores({query})[0];
        words = row.index_select(0, candidates);
      } else {
        words = torch::empty({candidates.numel()}, torch::kFloat64);
        const auto* index = candidates.data_ptr<int64_t>();
        for (int64_t i = 0; i < candidates.numel(); ++i) words[i] = bm25->Score(query, index[i]);
      }
      words = high > low ? (words - low) / (high - low) : torch::zeros_like(words);
      scores = (1 - lexical_weight) * scores.to(torch::kFloat64) + lexical_weight * words;
    }
    if (lexical) {
      torch::Tensor words = torch::empty({candidates.numel()}, torch::kFloat64);
      const auto* index = candidates.data_ptr<int64_t>();
      double* out = words.data_ptr<double>();
      for (int64_t i = 0; i < candidates.numel(); ++i) out[i] = lexical->Score(query, index[i]);
      scores = (1 - lexical_weight) * scores.to(torch::kFloat64) + lexical_weight * words;
    }
    return scores;
  }
  torch::Tensor Matrix(const torch::Tensor& queries, const torch::Tensor& candidates) const {
    if (model && !hybrid()) return model->ScoreMatrix(queries, candidates);
    namespace F = torch::nn::functional;
    const auto unit = F::NormalizeFuncOptions().dim(-1);
    return torch::matmul(F::normalize(queries, unit), F::normalize(candidates, unit).t());
  }
  // Scores (Q, N) of each query (rows of query_vectors) against every
  // candidate, in corpus order. The TF-IDF side weighs the queries' tokens
  // with the candidates' idf: the queries are not counted in it.
  torch::Tensor AgainstTheCandidates(const std::vector<int64_t>& queries) const {
    if (hierarchical()) {
      std::vector<const model::DocumentSentences*> sources;
      for (int64_t q : queries) sources.push_back(&query_sdr[q]);
      return BlendQueries(torch::stack(corpus_sentences->Scores(sources, normalize)), queries);
    }
    const torch::Tensor index = torch::tensor(queries, torch::kLong);
    return BlendQueries(Matrix(query_vectors.index_select(0, index), vectors), queries);  // (Q, N)
  }
  // Dense scores (Q, N) of --queries' documents, with TF-IDF blended in when hybrid.
  torch::Tensor BlendQueries(torch::Tensor scores, const std::vector<int64_t>& queries) const {
    if (bm25) scores = (1 - lexical_weight) * scores.to(torch::kFloat64) + lexical_weight * Bm25OfQueries(queries);
    if (lexical) {
      std::vector<std::vector<int32_t>> texts;
      for (int64_t q : queries) texts.push_back(query_corpus->Get(q).tokens);
      scores = (1 - lexical_weight) * scores.to(torch::kFloat64) + lexical_weight * lexical->ScoresOfTokens(texts);
    }
    return scores;
  }
  // Scores (Q, N - 1) of each query against every other document, in corpus
  // order with the query's own entry left out.
  torch::Tensor AgainstTheCorpus(const std::vector<int64_t>& queries) const {
    const int64_t N = vectors.size(0);
    const torch::Tensor all = torch::arange(N, torch::kLong);
    if (hierarchical()) {  // the z-score pool must not hold the query itself
      std::vector<const model::DocumentSentences*> sources;
      for (int64_t q : queries) sources.push_back(&sdr[q]);
      const std::vector<torch::Tensor> dense = corpus_sentences->Scores(sources, normalize, /*exclude=*/queries);
      std::vector<torch::Tensor> rows;
      for (size_t i = 0; i < queries.size(); ++i) {
        const torch::Tensor others = all.index({all.ne(queries[i])});
        rows.push_back(Blend(dense[i].index_select(0, others), queries[i], others).to(torch::kFloat64));
      }
      return torch::stack(rows);
    }
    const torch::Tensor index = torch::tensor(queries, torch::kLong);
    torch::Tensor scores = Matrix(vectors.index_select(0, index), vectors);  // (Q, N)
    if (lexical) scores = (1 - lexical_weight) * scores.to(torch::kFloat64) + lexical_weight * lexical->Scores(queries);
    if (bm25) {
      scores = (1 - lexical_weight) * scores.to(torch::kFloat64) +
               lexical_weight * MinMaxPerQuery(bm25->Scores(queries), queries);
    }
    const torch::Tensor others = all.unsqueeze(0).ne(index.unsqueeze(1));  // (Q, N)
    return scores.masked_select(others).view({static_cast<int64_t>(queries.size()), N - 1});
  }
};

// What the lexical side of a hybrid score keeps alive while it ranks.
struct LexicalSides {
  std::unique_ptr<LexicalIndex> tfidf;
  std::shared_ptr<const data::WordCounts> words, query_words;
  std::unique_ptr<Bm25Index> bm25;
};

// --windows-mean reads a MaxSim file's document vectors, which no other file has in its place.
void CheckWindowsMean(const EvalOptions& options, const EmbeddingFile& file) {
  if (options.windows_mean && file.score() != "maxsim") {
    throw Error("eval", "--windows-mean ranks a MaxSim file (match_bert maxsim) by its windows' mean; " + file.path() +
                            " scores by " + file.score() + " already");
  }
}

// The scorer's lexical side when --lexical-weight asks for one; the score's name.
LexicalSides AddLexical(Scorer* scorer, const EvalOptions& options, const data::Corpus& corpus, int rank,
                        std::string* score) {
  const double w = options.lexical_weight;
  DOCMATCH_CHECK(w >= 0 && w <= 1, "eval", "--lexical-weight is a share in [0, 1] or auto, not ", w);
  DOCMATCH_CHECK(options.lexical == "tfidf" || options.lexical == "bm25", "eval", "--lexical is tfidf or bm25, not '",
                 options.lexical, "'");
  LexicalSides sides;
  if (w == 0 && !options.lexical_weight_auto) return sides;
  if (options.lexical_weight_auto && options.relevance.empty()) {
    throw Error("eval", "--lexical-weight auto chooses the weight on half of the ranking's queries: give --relevance");
  }
  const bool bm25 = options.lexical == "bm25";
  DOCMATCH_CHECK(!(scorer->hierarchical() && scorer->normalize) && (!scorer->model || scorer->model->cosine()), "eval",
                 "--lexical-weight fuses a ", bm25 ? "BM25 score" : "TF-IDF cosine",
                 " with the cosine of document vectors (or MaxSim's mean of cosines); ",
                 scorer->hierarchical() ? "SDR's z-scored hierarchical score (--no-sdr-normalize: its cosines unscaled)"
                                        : "this model's pair head",
                 " is not one");
  scorer->dense_name = scorer->hierarchical() ? *score : "dense cosine";
  if (bm25) {
    sides.words = std::make_shared<const data::WordCounts>(
        data::WordCounts::OfCorpus(corpus.directory(), corpus.num_documents()));
    sides.bm25 = std::make_unique<Bm25Index>(sides.words, options.bm25);
    scorer->bm25 = sides.bm25.get();
    if (scorer->query_corpus) {
      sides.query_words = std::make_shared<const data::WordCounts>(
          data::WordCounts::OfCorpus(scorer->query_corpus->directory(), scorer->query_corpus->num_documents()));
      scorer->query_words = sides.query_words.get();
    }
    std::ostringstream name;
    name << "BM25 over words (k1 " << options.bm25.k1 << ", b " << options.bm25.b << "; min-max per query)";
    scorer->lexical_name = name.str();
  } else {
    sides.tfidf = std::make_unique<LexicalIndex>(corpus, options.progress && rank == 0);
    scorer->lexical = sides.tfidf.get();
    scorer->lexical_name = "TF-IDF cosine";
  }
  scorer->lexical_weight = w;
  *score = scorer->HybridName();
  return sides;
}

// Every rank scores pairs i % world == rank; the scores meet in an all-reduce.
std::vector<double> PairScores(const Scorer& scorer, const std::vector<data::LabelledPair>& pairs,
                               dist::ControlPlane& control) {
  std::vector<double> scores(pairs.size(), 0.0);
  for (size_t i = control.rank(); i < pairs.size(); i += control.size()) {
    scores[i] = scorer.PairScore(pairs[i].source, pairs[i].target);
  }
  control.Sum(scores);  // results are host values
  return scores;
}

std::vector<int> Labels(const std::vector<data::LabelledPair>& pairs) {
  std::vector<int> labels;
  for (const auto& p : pairs) labels.push_back(p.label > 0.5f ? 1 : 0);
  return labels;
}

// <output>/rankings.jsonl from every rank's top lists: rows (query, rank of its
// first relevant candidate or 0 for none, k documents; -1 past the candidates)
// and their scores, in query order.
// `queries`: the corpus the query indices point into (the candidates' own,
// or eval --queries').
void WriteRankings(const torch::Tensor& hits, const torch::Tensor& scores, const data::Relevance& relevance,
                   const data::Corpus& corpus, const data::Corpus& queries, const std::string& output) {
  const std::vector<std::string> ids = corpus.Ids(), query_ids = &queries == &corpus ? ids : queries.Ids();
  const int64_t k = scores.size(1);
  std::vector<int64_t> order(hits.size(0));
  std::iota(order.begin(), order.end(), 0);
  const auto* h = hits.data_ptr<int64_t>();
  const auto* sc = scores.data_ptr<double>();
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return h[a * (k + 2)] < h[b * (k + 2)]; });
  std::string text, run;
  bool run_written = true;
  for (int64_t row : order) {
    const int64_t query = h[row * (k + 2)];
    const std::vector<int64_t> relevant = data::RelevantDocuments(relevance.at(query));
    const int64_t first = h[row * (k + 2) + 1];
    nlohmann::json line = {{"query", query_ids[query]},
                           {"relevant", nlohmann::json::array()},
                           {"first_relevant_rank", first > 0 ? nlohmann::json(first) : nlohmann::json()},
                           {"hits", nlohmann::json::array()}};
    for (int64_t r : relevant) line["relevant"].push_back(ids[r]);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t doc = h[row * (k + 2) + 2 + i];
      if (doc < 0) break;
      const bool is_relevant = std::find(relevant.begin(), relevant.end(), doc) != relevant.end();
      line["hits"].push_back({{"id", ids[doc]}, {"score", sc[row * k + i]}, {"relevant", is_relevant}});
      // The run holds the queries eval averages: one with no relevant
      // candidate (every relevant document one prepare skipped) is left out
      // of both, where trec_eval would average in its zeros.
      if (!run_written || first == 0) continue;
      try {
        run += TrecRunLine(query_ids[query], ids[doc], i + 1, sc[row * k + i]);
      } catch (const Error& e) {
        LOG(WARNING) << "[eval] no " << output << "/run.trec: " << e.sentence();
        run_written = false;
      }
    }
    text += line.dump() + "\n";
  }
  fs::create_directories(output);
  files::ReplaceFile(output + "/rankings.jsonl", text);
  if (run_written) {
    files::ReplaceFile(output + "/run.trec", run);
  } else {
    std::error_code ignored;
    fs::remove(output + "/run.trec", ignored);  // an earlier eval's, which no longer matches rankings.jsonl
  }
}

// The candidates of every query: every document but the query itself, or
// with --queries every document. Column `column` of a query's row of
// scores is document Document(query, column).
struct Candidates {
  bool separate = false;
  int64_t count = 0;
  int64_t Document(int64_t query, int64_t column) const { return separate || column < query ? column : column + 1; }
  // The column of `document` (not the query itself) in the query's row.
  int64_t Column(int64_t query, int64_t document) const {
    return separate || document < query ? document : document - 1;
  }
  // The query's scores (Q, count) against its candidates.
  torch::Tensor Scores(const Scorer& scorer, const std::vector<int64_t>& queries) const {
    return (separate ? scorer.AgainstTheCandidates(queries) : scorer.AgainstTheCorpus(queries))
        .to(torch::kFloat64)
        .contiguous();
  }
};

Candidates CandidatesOf(const Scorer& scorer, int64_t N) {
  const bool separate = scorer.separate_queries();
  return {separate, separate ? N : N - 1};
}

// Each query's relevant candidates and grades, by column.
RankingQuery Judged(const data::Judgements& judgements, int64_t query, const Candidates& candidates,
                    const double* row) {
  RankingQuery r;
  r.scores.assign(row, row + candidates.count);
  r.relevant.assign(candidates.count, false);
  r.grades.assign(candidates.count, 0.0);
  for (const auto& [target, grade] : judgements) {
    if (grade < 1 || (!candidates.separate && target == query)) continue;
    if (target < 0) {  // a document prepare skipped (data::ReadRelevance)
      r.absent.push_back(static_cast<double>(grade));
      continue;
    }
    const int64_t column = candidates.Column(query, target);
    r.relevant[column] = true;
    r.grades[column] = static_cast<double>(grade);
  }
  return r;
}

// The ranking's queries: every query of the relevance list, or a seeded
// sample of --max-queries of them, in index order.
std::vector<int64_t> RankingQueries(const data::Relevance& relevance, const EvalOptions& options) {
  std::vector<int64_t> queries;
  for (const auto& [query, judged] : relevance) queries.push_back(query);
  if (options.max_queries > 0 && static_cast<int64_t>(queries.size()) > options.max_queries) {
    data::KeyedRandom random(options.seed, {0x72616e6bULL /* "rank" */});
    random.Shuffle(&queries);
    queries.resize(options.max_queries);
    std::sort(queries.begin(), queries.end());
  }
  return queries;
}

nlohmann::json Ranking(const Scorer& scorer, const data::Relevance& relevance, const std::vector<int64_t>& queries,
                       int64_t N, const EvalOptions& options, const data::Corpus& corpus,
                       const data::Corpus& query_corpus, dist::ControlPlane& control) {
  const Candidates candidates = CandidatesOf(scorer, N);
  const int64_t C = candidates.count;
  const std::vector<int> ks = {1, 10, 100};
  RankingMetrics none;
  for (int k : ks) none.recall[k] = 0;
  std::vector<double> sums = none.Sums();  // this rank's queries, as RankingMetrics::Sums adds them
  std::vector<int64_t> mine;
  for (size_t i = control.rank(); i < queries.size(); i += control.size()) mine.push_back(queries[i]);
  console::ProgressBar bar("[eval] ranking", static_cast<int64_t>(mine.size()), "queries", "",
                           control.rank() == 0 && options.progress);
  const int64_t k_kept = options.write_rankings;
  std::vector<int64_t> kept_hits;  // per query: query, rank of its first relevant candidate, k documents
  std::vector<double> kept_scores;
  const int64_t block = QueriesPerBlock(N);
  for (size_t begin = 0; begin < mine.size(); begin += block) {
    const std::vector<int64_t> block_queries(mine.begin() + begin, mine.begin() + std::min(mine.size(), begin + block));
    const torch::Tensor scores = candidates.Scores(scorer, block_queries);
    std::vector<RankingQuery> batch;
    for (size_t q = 0; q < block_queries.size(); ++q) {
      batch.push_back(
          Judged(relevance.at(block_queries[q]), block_queries[q], candidates, scores.data_ptr<double>() + q * C));
    }
    const RankingMetrics m = EvaluateRanking(batch, ks);
    for (size_t q = 0; k_kept > 0 && q < block_queries.size(); ++q) {
      // The top k candidates, best first (ties in corpus order), after the
      // query and the rank of its first relevant candidate.
      const int64_t query = block_queries[q];
      const double* row = scores.data_ptr<double>() + q * C;
      std::vector<int64_t> top(C);
      std::iota(top.begin(), top.end(), 0);
      const int64_t kept = std::min<int64_t>(k_kept, C);
      std::partial_sort(top.begin(), top.begin() + kept, top.end(),
                        [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      kept_hits.push_back(query);
      kept_hits.push_back(m.first_relevant_rank[q]);
      for (int64_t i = 0; i < k_kept; ++i) {
        kept_hits.push_back(i < kept ? candidates.Document(query, top[i]) : -1);
        kept_scores.push_back(i < kept ? row[top[i]] : 0.0);
      }
    }
    const std::vector<double> block_sums = m.Sums();
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += block_sums[i];
    bar.Add(static_cast<int64_t>(batch.size()), static_cast<int64_t>(batch.size()));
    console::StopIfInterrupted();
  }
  bar.Finish();
  if (k_kept > 0) {
    // Every rank's top lists, as host values on the control plane.
    const std::vector<int64_t> all_hits = control.AllGatherUneven(kept_hits);
    const std::vector<double> all_scores = control.AllGatherUneven(kept_scores);
    const int64_t rows = static_cast<int64_t>(all_hits.size()) / (k_kept + 2);
    if (control.rank() == 0)
      WriteRankings(torch::tensor(all_hits, torch::kLong).view({rows, k_kept + 2}),
                    torch::tensor(all_scores, torch::kFloat64).view({rows, k_kept}), relevance, corpus, query_corpus,
                    options.output);
  }
  control.Sum(sums);
  nlohmann::json json = RankingMetrics::FromSums(sums, ks).ToJson();
  json["candidates"] = C;
  json["sampled_from"] = relevance.size();
  if (candidates.separate) json["queries_corpus"] = options.queries;
  return json;
}

// --lexical-weight auto: the weight of kFusionWeights whose fused ranking
// has the highest MRR over `queries` (the lowest weight among equals).
// Each query's dense and lexical rows are scored once; every weight's
// reciprocal rank is then a count over the fused row, ties broken against
// the relevant candidates as EvaluateRanking breaks them.

nlohmann::json ChooseLexicalWeight(const Scorer& scorer, const data::Relevance& relevance,
                                   const std::vector<int64_t>& queries, int64_t N, const EvalOptions& options,
                                   dist::ControlPlane& control, double* chosen) {
  Scorer dense = scorer, lexical = scorer;
  dense.model = nullptr;  // the cosine Blend fuses, not a pair head's scaled one
  dense.lexical = nullptr;
  dense.bm25 = nullptr;
  lexical.lexical_weight = 1;
  const Candidates candidates = CandidatesOf(scorer, N);
  constexpr size_t kWeights = std::size(kFusionWeights);
  std::vector<double> sums(kWeights + 1, 0.0);  // reciprocal ranks per weight, then the queries counted
  std::vector<int64_t> mine;
  for (size_t i = control.rank(); i < queries.size(); i += control.size()) mine.push_back(queries[i]);
  console::ProgressBar bar("[eval] choosing the lexical weight", static_cast<int64_t>(mine.size()), "queries", "",
                           control.rank() == 0 && options.progress);
  const int64_t block = QueriesPerBlock(N);
  for (size_t begin = 0; begin < mine.size(); begin += block) {
    const std::vector<int64_t> block_queries(mine.begin() + begin, mine.begin() + std::min(mine.size(), begin + block));
    const torch::Tensor d = candidates.Scores(dense, block_queries), l = candidates.Scores(lexical, block_queries);
    std::vector<uint8_t> mask(block_queries.size() * candidates.count, 0);
    for (size_t q = 0; q < block_queries.size(); ++q) {
      const int64_t query = block_queries[q];
      for (int64_t target : data::RelevantDocuments(relevance.at(query))) {
        if (candidates.separate || target != query) mask[q * candidates.count + candidates.Column(query, target)] = 1;
      }
    }
    const torch::Tensor relevant =
        torch::from_blob(mask.data(), {static_cast<int64_t>(block_queries.size()), candidates.count}, torch::kUInt8)
            .to(torch::kBool);
    const torch::Tensor any = relevant.any(1);
    sums[kWeights] += any.sum().item<double>();
    for (size_t w = 0; w < kWeights; ++w) {
      const double weight = kFusionWeights[w];
      const torch::Tensor fused = (1 - weight) * d + weight * l;
      sums[w] += model::ReciprocalRanks(fused, relevant).masked_select(any).sum().item<double>();
    }
    bar.Add(static_cast<int64_t>(block_queries.size()), static_cast<int64_t>(block_queries.size()));
    console::StopIfInterrupted();
  }
  bar.Finish();
  control.Sum(sums);
  const double counted = std::max(1.0, sums[kWeights]);
  const size_t best = FirstBest(std::vector<double>(sums.begin(), sums.begin() + kWeights));
  nlohmann::json by_weight = nlohmann::json::object();
  for (size_t w = 0; w < kWeights; ++w) {
    std::ostringstream key;
    key << kFusionWeights[w];
    by_weight[key.str()] = sums[w] / counted;
  }
  *chosen = kFusionWeights[best];
  return {{"chosen", *chosen},
          {"by", "mrr"},
          {"chosen_on_queries", static_cast<int64_t>(sums[kWeights])},
          {"mrr_by_weight", by_weight}};
}

// The pair classification and ranking of `scorer`'s vectors; rank 0 writes
// metrics.json.
nlohmann::json Score(const Scorer& given, const EvalOptions& options, const data::Corpus& corpus,
                     const data::Corpus* queries, nlohmann::json metrics, dist::ControlPlane& control) {
  Scorer scorer = given;
  std::optional<data::Relevance> relevance;
  std::vector<int64_t> ranked;
  if (!options.relevance.empty()) {
    relevance = queries ? data::ReadRelevance(options.relevance, *queries, corpus)
                        : data::ReadRelevance(options.relevance, corpus);
    ranked = RankingQueries(*relevance, options);
  }
  if (options.lexical_weight_auto) {
    // A seeded half of the queries chooses the weight; the other half, which
    // played no part in the choice, is the one ranked and reported.
    if (ranked.size() < 2) throw Error("eval", "--lexical-weight auto needs two ranking queries or more to split");
    std::vector<int64_t> shuffled = ranked;
    data::KeyedRandom random(options.seed, {0x68616c66ULL /* "half" */});
    random.Shuffle(&shuffled);
    std::vector<int64_t> choose(shuffled.begin(), shuffled.begin() + shuffled.size() / 2);
    ranked.assign(shuffled.begin() + shuffled.size() / 2, shuffled.end());
    std::sort(choose.begin(), choose.end());
    std::sort(ranked.begin(), ranked.end());
    double weight = 0;
    metrics["lexical_weight"] =
        ChooseLexicalWeight(scorer, *relevance, choose, scorer.vectors.size(0), options, control, &weight);
    scorer.lexical_weight = weight;
    metrics["score"] = scorer.HybridName();
  }
  if (!options.test_pairs.empty()) {
    const auto test = data::ReadPairs(options.test_pairs, corpus);
    const std::vector<double> test_scores = PairScores(scorer, test, control);
    double threshold = 0;  // logit 0: probability 0.5
    if (!options.valid_pairs.empty()) {
      const auto valid = data::ReadPairs(options.valid_pairs, corpus);
      const ThresholdObjective objective =
          options.threshold_objective == "f1" ? ThresholdObjective::kF1 : ThresholdObjective::kAccuracy;
      const std::vector<double> valid_scores = PairScores(scorer, valid, control);
      threshold = ChooseThreshold(valid_scores, Labels(valid), objective);
      metrics["classification"]["valid"] = Classify(valid_scores, Labels(valid), threshold).ToJson();
      metrics["classification"]["valid"]["pairs"] = valid.size();
    }
    metrics["classification"]["test"] = Classify(test_scores, Labels(test), threshold).ToJson();
    metrics["classification"]["test"]["pairs"] = test.size();
    int64_t positives = 0;
    for (int label : Labels(test)) positives += label;
    // The best a constant guess does: every pair labelled with the majority class.
    metrics["classification"]["test"]["majority_accuracy"] =
        static_cast<double>(std::max<int64_t>(positives, test.size() - positives)) / std::max<size_t>(1, test.size());
  }
  if (relevance) {
    metrics["ranking"] = Ranking(scorer, *relevance, ranked, scorer.vectors.size(0), options, corpus,
                                 queries ? *queries : corpus, control);
    // The queries the ranking counts (those with a relevant document), as the choice counts them.
    if (options.lexical_weight_auto) metrics["lexical_weight"]["reported_on_queries"] = metrics["ranking"]["queries"];
  }
  if (control.rank() == 0) {
    fs::create_directories(options.output);
    files::ReplaceFile(options.output + "/metrics.json", metrics.dump(2) + "\n");
  }
  control.Barrier();
  return metrics;
}

// Vectors computed elsewhere (another library, a baseline), scored by cosine
// on the same pairs and ranking lists as every model.
nlohmann::json EvaluateVectors(const EvalOptions& options, const data::Corpus& corpus, const data::Corpus* queries,
                               dist::ControlPlane& control) {
  if (options.embeddings.empty()) {
    throw Error("eval", "give --model, or --embeddings holding vectors made elsewhere (scored by cosine)");
  }
  const EmbeddingFile file(options.embeddings);
  file.CheckCorpusOrder(corpus, "eval", "write the vectors in corpus order");
  Scorer scorer;
  scorer.model = nullptr;
  scorer.vectors = file.Vectors(0, file.size()).to(torch::kFloat64);
  CheckWindowsMean(options, file);
  std::string score = options.windows_mean ? kWindowsMean : "cosine";
  if (file.score() == "maxsim" && !options.windows_mean) {  // a fused file that kept a MatchBERT's windows
    scorer.UseSentences(file.Sentences(0, file.size()));
    score = kMaxSim;
  }
  if (queries) {
    if (options.query_embeddings.empty()) {
      throw Error("eval",
                  "--queries without --model needs --query-embeddings: the queries' vectors, "
                  "made as --embeddings' were");
    }
    const EmbeddingFile query_file(options.query_embeddings);
    query_file.CheckCorpusOrder(*queries, "eval", "write the query vectors in the order of the --queries corpus");
    scorer.query_vectors = query_file.Vectors(0, query_file.size()).to(torch::kFloat64);
    if (scorer.hierarchical()) {
      if (query_file.score() != "maxsim") {
        throw Error("eval", options.embeddings + " scores by MaxSim over windows, but " + options.query_embeddings +
                                " holds no windows: make both files alike");
      }
      scorer.query_sdr = query_file.Sentences(0, query_file.size());
    }
    scorer.query_corpus = queries;
  }
  const LexicalSides lexical = AddLexical(&scorer, options, corpus, control.rank(), &score);
  nlohmann::json metrics = {{"model", file.kind() == "fused" ? "fused: " + file.fused_from() : file.model()},
                            {"kind", file.kind()},
                            {"corpus", options.corpus},
                            {"embeddings", options.embeddings},
                            {"score", score}};
  return Score(scorer, options, corpus, queries, std::move(metrics), control);
}

// eval --queries: their corpus, checked against the candidates' tokenizer.
std::unique_ptr<data::Corpus> OpenQueries(const EvalOptions& options, const data::Corpus& corpus, int rank) {
  if (options.queries.empty()) return nullptr;
  // The candidates' own corpus (the same folder, or a copy with the same
  // manifest) as --queries would rank every query against itself, a hit at
  // rank 1 that measures nothing: ranked as without --queries, each query
  // left out of its own candidates, and said.
  std::error_code error;
  const auto manifest = [](const std::string& folder) {
    std::ifstream in(std::filesystem::path(folder) / data::kManifestFile, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  if (std::filesystem::equivalent(options.queries, options.corpus, error) ||
      manifest(options.queries) == manifest(options.corpus)) {
    if (rank == 0) {
      LOG(WARNING) << "[eval] --queries " << options.queries << " is the corpus " << options.corpus
                   << " itself: each query is ranked against the other documents, leaving itself out, as without "
                      "--queries";
    }
    return nullptr;
  }
  if (options.relevance.empty()) {
    throw Error("eval",
                "--queries ranks its documents against the corpus: give --relevance, whose "
                "query ids are in " +
                    options.queries + " and relevant ids in " + options.corpus);
  }
  auto queries = std::make_unique<data::Corpus>(options.queries);
  if (queries->manifest().tokenizer_hash != corpus.manifest().tokenizer_hash) {
    throw Error("eval", "--queries " + options.queries + " was prepared with another tokenizer than " + options.corpus +
                            ": prepare it with --tokenizer " + corpus.tokenizer_path());
  }
  return queries;
}

}  // namespace

nlohmann::json RunEvaluation(const EvalOptions& options, dist::ProcessGroup& group) {
  const torch::Device device = group.device();
  dist::ControlPlane& control = group.control();
  const data::Corpus corpus(options.corpus);
  const std::unique_ptr<data::Corpus> queries = OpenQueries(options, corpus, group.rank());
  torch::NoGradGuard no_grad;
  if (options.model.empty()) return EvaluateVectors(options, corpus, queries.get(), control);
  io::ModelFolderInfo info;
  std::unique_ptr<model::DocumentModel> model = io::LoadModelFolder(options.model, &info);
  io::CheckTokenizer(info, corpus, options.model);
  model->module().to(device);
  model->module().eval();

  std::string embeddings = options.embeddings;
  if (embeddings.empty()) {
    embeddings = options.output + "/embeddings.h5";
    EmbedCorpus(*model, options.model, corpus, embeddings, options.batch_size, options.progress, group);
  }
  // The queries' vectors, from --query-embeddings or embedded here.
  std::string query_embeddings = options.query_embeddings;
  if (queries) {
    io::CheckTokenizer(info, *queries, options.model);
    if (query_embeddings.empty()) {
      query_embeddings = options.output + "/query-embeddings.h5";
      EmbedCorpus(*model, options.model, *queries, query_embeddings, options.batch_size, options.progress, group);
    }
  }
  const auto check = [&](const EmbeddingFile& file, const data::Corpus& of, const std::string& name) {
    if (file.kind() == "fused") {
      throw Error("eval", file.path() +
                              " holds fused vectors (docmatch fuse), scored by their cosine without a model: "
                              "evaluate it without --model");
    }
    if (file.size() != of.num_documents() || file.kind() != info.config.kind) {
      throw Error("eval", file.path() + " holds " + std::to_string(file.size()) + " " + file.kind() +
                              " vectors; corpus '" + name + "' has " + std::to_string(of.num_documents()) +
                              " documents and the model is " + info.config.kind +
                              ": embed this corpus with this model first");
    }
    if (file.has_sentences() != model->has_sentences()) {
      // A maxsim model's file holds its windows; a mean model's does not,
      // though both are match_bert: scoring one by the other's rule is wrong.
      throw Error("eval", file.path() + (file.has_sentences() ? " holds" : " holds no") +
                              " window or sentence vectors, and the model " +
                              (model->has_sentences() ? "scores by them" : "scores by one vector a document") +
                              ": embed this corpus with this model first");
    }
  };
  const EmbeddingFile file(embeddings);
  check(file, corpus, options.corpus);
  model->module().to(torch::kCPU);  // scoring works on the CPU copies of the vectors
  // Cosine scores in float64, so that near-ties rank and threshold the same
  // as any float64 recomputation from the file; SMASH's head stays float32.
  torch::Tensor vectors = file.Vectors(0, file.size());
  if (model->cosine()) vectors = vectors.to(torch::kFloat64);
  Scorer scorer;
  scorer.model = model.get();
  scorer.vectors = vectors;
  // The file names its score, as search reads it: MaxSim's cosines are never z-scored.
  scorer.normalize = options.sdr_normalize && file.score() == "sdr";
  CheckWindowsMean(options, file);
  if (file.has_sentences() && !options.windows_mean) scorer.UseSentences(file.Sentences(0, file.size()));
  if (queries) {
    const EmbeddingFile query_file(query_embeddings);
    check(query_file, *queries, options.queries);
    scorer.query_vectors = query_file.Vectors(0, query_file.size());
    if (model->cosine()) scorer.query_vectors = scorer.query_vectors.to(torch::kFloat64);
    if (scorer.hierarchical()) scorer.query_sdr = query_file.Sentences(0, query_file.size());
    scorer.query_corpus = queries.get();
  }
  // A cosine model's pair logit is its cosine times a fixed scale (SMITH's
  // amplifier): the ranking is the cosine's. SMASH's head is not a cosine.
  std::string score = scorer.hierarchical()  ? (file.score() == "sdr" ? "sdr hierarchical" : kMaxSim)
                      : options.windows_mean ? kWindowsMean
                      : model->cosine()      ? "cosine (the pair logit scales it)"
                                             : "pair logit (the model's pair head)";
  if (scorer.hierarchical() && scorer.normalize) {
    score += ", z-scored";
    if (options.sdr_pair_pool > 0) {
      // One seeded sample for every pair: two more than the pool, so that
      // leaving out a pair's own documents still leaves the pool's size.
      std::vector<int64_t> sample(file.size());
      std::iota(sample.begin(), sample.end(), int64_t{0});
      data::KeyedRandom random(options.seed, {0x706f6f6cULL /* "pool" */});
      random.Shuffle(&sample);
      sample.resize(std::min<int64_t>(file.size(), options.sdr_pair_pool + 2));
      scorer.sdr_pool = std::move(sample);
      scorer.pool_size = static_cast<size_t>(options.sdr_pair_pool);
      score += " (pairs among " + std::to_string(options.sdr_pair_pool) + " documents)";
    }
  }
  const LexicalSides lexical = AddLexical(&scorer, options, corpus, control.rank(), &score);
  nlohmann::json metrics = {{"model", options.model},
                            {"kind", info.config.kind},
                            {"corpus", options.corpus},
                            {"embeddings", embeddings},
                            {"score", score}};
  if (queries) metrics["query_embeddings"] = query_embeddings;
  return Score(scorer, options, corpus, queries.get(), std::move(metrics), control);
}

std::string MetricsTable(const nlohmann::json& m) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(4);
  out << "model " << m.value("model", "") << " (" << m.value("kind", "") << ", " << m.value("score", "") << ")\n";
  if (m.contains("classification")) {
    out << "classification  split  pairs  threshold  accuracy  precision  recall  f1\n";
    for (const char* split : {"valid", "test"}) {
      if (!m["classification"].contains(split)) continue;
      const auto& c = m["classification"][split];
      out << "                " << std::setw(5) << split << "  " << std::setw(5) << c.value("pairs", 0) << "  "
          << std::setw(9) << c.value("threshold", 0.0) << "  " << std::setw(8) << c.value("accuracy", 0.0) << "  "
          << std::setw(9) << c.value("precision", 0.0) << "  " << std::setw(6) << c.value("recall", 0.0) << "  "
          << c.value("f1", 0.0) << "\n";
    }
    out << "  (majority-class accuracy on test: " << m["classification"]["test"].value("majority_accuracy", 0.0)
        << ")\n";
  }
  if (m.contains("lexical_weight")) {
    const auto& w = m["lexical_weight"];
    out << std::setprecision(1) << "lexical weight " << w.value("chosen", 0.0) << std::setprecision(4)
        << ": the best MRR of 0, 0.1, ..., 1 on " << w.value("chosen_on_queries", 0)
        << " queries (a seeded half); the ranking below is the other " << w.value("reported_on_queries", 0) << "\n";
  }
  if (m.contains("ranking")) {
    const auto& r = m["ranking"];
    out << "ranking  queries  candidates  MRR     MRR@10  nDCG@10 MAP     P@1     P@10    R@10    R@100   MPR\n";
    out << "         " << std::setw(7) << r.value("queries", 0) << "  " << std::setw(10) << r.value("candidates", 0);
    for (const char* k : {"mrr", "mrr@10", "ndcg@10", "map", "p@1", "p@10", "recall@10", "recall@100", "mpr"})
      out << "  " << r.value(k, 0.0);
    out << "\n  (R@k: recall, the share of a query's relevant documents in its top k; MPR: mean percentile rank of "
           "them, 0 = top)\n";
  }
  return out.str();
}

}  // namespace docmatch::eval
