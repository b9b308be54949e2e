// `docmatch choose`: the way of reading a corpus that finds its related
// documents best, measured on the user's own links.
//
// The corpus is embedded once, as the vectors of up to `windows` windows of
// the model's max_tokens a document (a MaxSim file). Every reader is a
// function of those vectors: the first window (the first max_tokens tokens),
// the windows' mean (the formula SMITH's step-0 residual combine applies to
// its blocks), their elementwise max, and MaxSim (each query window's best
// cosine among the candidate's windows, averaged); beside them TF-IDF and
// BM25 over the corpus's words, each dense reader fused with each lexical
// one, every two dense readers fused, and each such pair with TF-IDF.
//
// The relevance list's queries are split at random (seeded): on one half each
// fused row's weight is chosen from 0, 0.1, ..., 1 by MRR; on the other every
// row is measured, with paired bootstrap intervals (eval/bootstrap.h) against
// the best. The choice is the best row, or (--prefer cheapest) the cheapest
// to run of the rows within its interval: a row's cost counts the windows a
// document its dense readers embed (1 for the first window, --windows for
// the others, half a window more for MaxSim's kept windows) and a tenth for
// each lexical reader. The choice's model folders (the given model with the
// reader's window settings) and the commands that embed, evaluate, search and
// export with it are written to the output folder. The windows file and
// what it was embedded from (<output>/windows.json) stay there: a later run
// into the same folder with the same model, corpus and --windows reads them
// instead of embedding again.
//
// With --finetune, the model is also fine-tuned on the choosing half's
// related pairs (those touching a measured query left out) within what the
// budget leaves after a second embedding pass; the fine-tuned windows give
// the dense readers alone and with each lexical one as more rows of the same
// table (their weights chosen on the queries the model was trained on).
//
// Beside the labels, a proxy that needs none ranks the dense readers too:
// each long document's first half of windows must find its second half
// among every document's second halves (DocSplit's views), and whether it
// picks what the labels pick is reported.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "dist/process_group.h"

namespace docmatch::eval {

struct ChooseOptions {
  std::string model;      // a flat (match_bert) model folder, window pooling not learned: import-hf's output
  std::string corpus;     // prepared with the model's tokenizer
  std::string relevance;  // queries and their relevant documents, all of the corpus (ReadRelevance)
  std::string output = "choose";
  int64_t windows = 8;  // windows of the model's max_tokens read per document
  int64_t max_queries = 0;  // a seeded sample of the relevance list's queries (0 = all)
  uint64_t seed = 1234;     // the split of the queries, the sample, the bootstrap
  int64_t resamples = 10000;
  int64_t proxy_documents = 2000;  // label-free proxy: documents whose halves are matched
  double budget_seconds = 0;       // after the embedding pass, rows and the proxy stop when spent (0: none)
  // "best": the row of the highest MRR; "cheapest": the cheapest to run of
  // the rows within its interval (ReadingCost).
  std::string prefer = "best";
  int64_t batch_size = 16;
  // Fine-tuning (0: none): the model trained on the choosing half's related
  // pairs for at most this many steps (fewer when --budget runs out), its
  // windows embedded again and its dense readers measured beside the rest.
  int64_t finetune_steps = 0;
  int64_t finetune_batch_size = 16;  // pairs a step
  double finetune_lr = 2e-5;
  bool progress = true;
};

// A fine-tuned model: its folder, the steps taken, and whether the time
// given ran out before the steps asked.
struct TunedModel {
  std::string folder;
  int64_t steps = 0;
  bool out_of_time = false;
};
// Collective: fine-tunes ChooseOptions::model on `pairs` (a pairs file of
// the corpus, `count` pairs) in the run folder `run`, for at most
// `max_seconds` of training (0: no limit). eval does not link the training
// code: the command gives it.
using FineTuner = std::function<TunedModel(const std::string& pairs, int64_t count, const std::string& run,
                                           double max_seconds)>;

// Collective (the embedding pass); rank 0 scores, writes
// <output>/choice.json, <output>/rankings/<row>.jsonl (each measured query's
// first relevant rank, for scripts/compare-rankings.py), <output>/models/
// and <output>/recipe.sh, and returns the choice (other ranks: null).
nlohmann::json RunChoose(const ChooseOptions& options, dist::ProcessGroup& group, const FineTuner& tune = nullptr);

// The choice as a table: every row ranked, its MRR and interval, its
// difference from the best, the proxy's ranking and the recipe's commands.
std::string ChoiceTable(const nlohmann::json& choice);

}  // namespace docmatch::eval
