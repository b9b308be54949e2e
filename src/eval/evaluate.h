// `docmatch eval`: pair classification and corpus-wide ranking from one
// model folder and its embeddings (eval/embeddings.h).
//
//  * Classification: each pair's score is the model's pair logit (SDR: its
//    hierarchical score); the threshold is the one that maximises accuracy
//    (or F1) on the validation pairs, then applied unchanged to the test
//    pairs (eval/metrics.h).
//  * Ranking: each query of the relevance list against every other document
//    of the corpus; with `queries` (a corpus of its own, prepared with the
//    same tokenizer) each query document against every document of the
//    corpus, none left out, and the TF-IDF side's idf counts the corpus
//    alone. Queries are dealt round-robin to the ranks; each rank
//    scores a block of its queries at a time against all candidates (never
//    the full query x corpus matrix), reduces every query to its metrics,
//    and the sums meet in one all-reduce.
//
// Results go to <output>/metrics.json and, on rank 0, as a table to stdout.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "dist/process_group.h"
#include "eval/bm25.h"

namespace docmatch::eval {

struct EvalOptions {
  std::string model;                    // model folder (checkpoint, best/ or export)
  std::string corpus;                   // prepared corpus folder
  std::string embeddings;               // an `embed` file of this model; empty: embed into <output>/embeddings.h5
  std::string valid_pairs, test_pairs;  // classification (JSONL pairs); empty: skipped
  std::string relevance;                // ranking (data/batches/pairs.h ReadRelevance); empty: skipped
  std::string queries;                  // ranking: a prepared corpus of the queries; empty: queries from `corpus`
  std::string query_embeddings;         // its `embed` file; empty: embedded into <output>/query-embeddings.h5
  std::string output = "eval";          // folder for metrics.json
  std::string threshold_objective = "accuracy";  // accuracy | f1
  int64_t max_queries = 0;                       // ranking: 0 = every query, else a seeded sample
  uint64_t seed = 1234;
  bool windows_mean = false;   // a MaxSim file ranked by its document vectors (the windows' mean) instead
  bool sdr_normalize = true;   // SDR: the paper's z-score step (eval/sdr_scoring.h)
  int64_t sdr_pair_pool = 64;  // SDR pairs: documents each pair's target is z-scored among
  double lexical_weight = 0;   // hybrid retrieval: share of the lexical score; 0 = dense only
  // Instead: the weight of 0, 0.1, ..., 1 with the best MRR on a seeded half
  // of the ranking's queries; the ranking is then reported on the other half
  // (metrics.json's "lexical_weight" says which weight, on how many queries).
  bool lexical_weight_auto = false;
  // The lexical score: "tfidf" (a TF-IDF cosine over the model's token ids,
  // eval/lexical.h) or "bm25" (BM25 over the corpus's words, eval/bm25.h,
  // min-max normalised per query over the other documents before the blend).
  std::string lexical = "tfidf";
  Bm25Parameters bm25;
  int64_t batch_size = 16;     // documents per embedding batch
  int64_t write_rankings = 0;  // ranking: keep each query's top k in <output>/rankings.jsonl; 0 = none
  bool progress = true;
};

// Collective; returns the metrics (the same on every rank).
nlohmann::json RunEvaluation(const EvalOptions& options, dist::ProcessGroup& group);

// The readable table of a metrics JSON.
std::string MetricsTable(const nlohmann::json& metrics);

}  // namespace docmatch::eval
