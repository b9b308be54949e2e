// The reader chosen by measurement on the user's links (choose.h).
#include "eval/choose.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iomanip>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/batches/pairs.h"
#include "data/corpus/corpus.h"
#include "data/corpus/random.h"
#include "data/corpus/word_counts.h"
#include "eval/bm25.h"
#include "eval/bootstrap.h"
#include "eval/embeddings.h"
#include "eval/lexical.h"
#include "eval/metrics.h"
#include "eval/sdr_scoring.h"
#include "files/file_writer.h"
#include "io/checksums.h"
#include "io/model_folder.h"
#include "model/losses.h"
#include "model/match_bert.h"

namespace docmatch::eval {
namespace {
namespace fs = std::filesystem;

// Half of the queries choose the fusion weights, half are measured: fewer
// than this leaves too few on either side to tell rows apart.
constexpr size_t kFewestQueries = 20;
// The proxy needs documents with two halves of windows to match.
constexpr size_t kFewestProxyDocuments = 10;
// Every score matrix of a block of queries is held at once.
constexpr int64_t kScoreMatrices = 8;

// The scores every row is made of.
enum Base : int { kFirst, kMean, kMax, kMaxSim, kTfidf, kBm25, kBases };
constexpr int kDense[] = {kFirst, kMean, kMax, kMaxSim};
constexpr int kLexical[] = {kTfidf, kBm25};

struct BaseInfo {
  const char* name;
  const char* slug;
  const char* window_pooling;  // a dense reader's model folder's
};
constexpr BaseInfo kBaseInfo[kBases] = {{"first window", "first", "mean"},  {"windows mean", "mean", "mean"},
                                        {"windows max", "max", "max"},      {"MaxSim", "maxsim", "maxsim"},
                                        {"TF-IDF", "tfidf", ""},            {"BM25", "bm25", ""}};

// A weighted sum of the bases' scores.
using Combo = std::array<double, kBases>;

Combo Only(int base) {
  Combo c{};
  c[base] = 1;
  return c;
}

// (1 - w) x + w y.
Combo Mix(const Combo& x, const Combo& y, double w) {
  Combo c{};
  for (int b = 0; b < kBases; ++b) c[b] = (1 - w) * x[b] + w * y[b];
  return c;
}

// What a row costs to run: the windows a document its dense readers embed
// (1 for the first window, `windows` for the others, half a window more for
// MaxSim's kept windows) and a tenth for each lexical reader.
double ReadingCost(const Combo& c, int64_t windows) {
  double cost = 0;
  for (int b : kDense)
    if (c[b] != 0) cost += (b == kFirst ? 1.0 : static_cast<double>(windows)) + (b == kMaxSim ? 0.5 : 0.0);
  for (int b : kLexical)
    if (c[b] != 0) cost += 0.1;
  return cost;
}

std::string Weight(double w) {
  std::ostringstream out;
  out << std::setprecision(3) << w;
  return out.str();
}

// A row of the table: (1 - weight) x + weight y; a `free` row's weight is
// chosen on the choosing half.
struct Row {
  std::string name, slug;
  Combo x{}, y{};
  double weight = 0;
  bool free = false;
  bool tuned = false;  // reads the fine-tuned model's windows
  Combo combo() const { return free ? Mix(x, y, weight) : x; }
};

// The readers of one embedding pass.
struct Readers {
  int64_t N = 0;
  std::vector<model::DocumentSentences> windows;  // per document: unit window vectors (W_d, D) float64
  std::array<torch::Tensor, 3> vectors;           // first, mean, max: (N, D) float64 unit rows
  std::unique_ptr<SentencePool> pool;             // MaxSim against every document's windows
  std::shared_ptr<const LexicalIndex> tfidf;
  std::shared_ptr<const Bm25Index> bm25;

  // Each `needed` base's scores (Q, N) float64 of documents `queries`
  // against every document (their own included: the caller excludes it).
  std::array<torch::Tensor, kBases> Scores(const std::vector<int64_t>& queries, const Combo& needed) const {
    std::array<torch::Tensor, kBases> out;
    const torch::Tensor index = torch::tensor(queries, torch::kInt64);
    for (int b : {kFirst, kMean, kMax}) {
      if (needed[b] != 0) out[b] = vectors[b].index_select(0, index).matmul(vectors[b].t());
    }
    if (needed[kMaxSim] != 0) {
      std::vector<const model::DocumentSentences*> sources;
      for (int64_t q : queries) sources.push_back(&windows[q]);
      out[kMaxSim] = torch::stack(pool->Scores(sources, /*normalize=*/false)).to(torch::kFloat64);
    }
    if (needed[kTfidf] != 0) out[kTfidf] = tfidf->Scores(queries);
    if (needed[kBm25] != 0) out[kBm25] = MinMaxPerQuery(bm25->Scores(queries), queries);
    return out;
  }
};

// The window vectors (sum of W_d, D) of `documents`, renormalised in
// float64, and the document of each row (sum of W_d,) numbered 0, 1, ...
std::pair<torch::Tensor, torch::Tensor> Stacked(const std::vector<model::DocumentSentences>& documents) {
  std::vector<torch::Tensor> rows;
  std::vector<int64_t> owner;
  for (size_t d = 0; d < documents.size(); ++d) {
    rows.push_back(documents[d].vectors);
    owner.insert(owner.end(), documents[d].vectors.size(0), static_cast<int64_t>(d));
  }
  return {torch::cat(rows), torch::tensor(owner, torch::kInt64)};
}

// Every document's windows, read back from the windows file, and the dense
// readers' vectors of them. The window vectors are renormalised in float64,
// so that every score here is a float64 cosine of the file's vectors. The
// lexical readers are `lexical`'s when given, else built.
Readers ReadWindows(const std::string& windows_file, const data::Corpus& corpus, bool progress,
                    const Readers* lexical = nullptr) {
  namespace F = torch::nn::functional;
  Readers readers;
  readers.N = corpus.num_documents();
  const EmbeddingFile file(windows_file);
  file.CheckCorpusOrder(corpus, "choose", "embed again");
  readers.windows = file.Sentences(0, file.size());
  std::vector<torch::Tensor> first;
  for (model::DocumentSentences& d : readers.windows) {
    d.vectors = F::normalize(d.vectors.to(torch::kFloat64), F::NormalizeFuncOptions().dim(1));
    first.push_back(d.vectors[0]);
  }
  const auto [rows, owner] = Stacked(readers.windows);
  readers.vectors = {torch::stack(first), model::PoolRowsByDocument(rows, owner, readers.N, "mean"),
                     model::PoolRowsByDocument(rows, owner, readers.N, "max")};
  readers.pool = std::make_unique<SentencePool>(readers.windows);
  if (lexical != nullptr) {
    readers.tfidf = lexical->tfidf;
    readers.bm25 = lexical->bm25;
    return readers;
  }
  readers.tfidf = std::make_shared<const LexicalIndex>(corpus, progress);
  readers.bm25 = std::make_shared<const Bm25Index>(
      std::make_shared<const data::WordCounts>(data::WordCounts::OfCorpus(corpus.directory(), readers.N)),
      Bm25Parameters{});
  return readers;
}

// rr[c][i]: combo c's reciprocal rank of queries[i], each query's own
// document excluded, ties counted against the relevant.
std::vector<std::vector<double>> ReciprocalRanksOf(const Readers& readers, const data::Relevance& relevance,
                                                   const std::vector<int64_t>& queries,
                                                   const std::vector<Combo>& combos, const std::string& label,
                                                   bool progress) {
  Combo needed{};
  for (const Combo& c : combos)
    for (int b = 0; b < kBases; ++b)
      if (c[b] != 0) needed[b] = 1;
  std::vector<std::vector<double>> rr(combos.size());
  const int64_t N = readers.N, block = QueriesPerBlock(N, kScoreMatrices);
  console::ProgressBar bar(label, static_cast<int64_t>(queries.size()), "queries", "", progress);
  for (size_t begin = 0; begin < queries.size(); begin += block) {
    const std::vector<int64_t> part(queries.begin() + begin,
                                    queries.begin() + std::min(queries.size(), begin + static_cast<size_t>(block)));
    const int64_t Q = static_cast<int64_t>(part.size());
    const std::array<torch::Tensor, kBases> bases = readers.Scores(part, needed);  // each (Q, N)
    torch::Tensor relevant = torch::zeros({Q, N}, torch::kBool);                   // (Q, N)
    auto mark = relevant.accessor<bool, 2>();
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t d : data::RelevantDocuments(relevance.at(part[i])))
        if (d != part[i]) mark[i][d] = true;
    const torch::Tensor rows = torch::arange(Q, torch::kInt64), self = torch::tensor(part, torch::kInt64);
    for (size_t c = 0; c < combos.size(); ++c) {
      torch::Tensor scores = torch::zeros({Q, N}, torch::kFloat64);
      for (int b = 0; b < kBases; ++b)
        if (combos[c][b] != 0) scores.add_(bases[b], combos[c][b]);
      scores.index_put_({rows, self}, -std::numeric_limits<double>::infinity());
      const torch::Tensor r = model::ReciprocalRanks(scores, relevant).contiguous();  // (Q,)
      rr[c].insert(rr[c].end(), r.data_ptr<double>(), r.data_ptr<double>() + Q);
    }
    bar.Add(Q);
    console::StopIfInterrupted();
  }
  bar.Finish();
  return rr;
}

double Mean(const std::vector<double>& values) {
  return values.empty() ? 0.0 : std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// Each row of `which`'s weight: the first best of kFusionWeights by MRR on `queries`.
void ChooseWeights(std::vector<Row>* rows, const std::vector<size_t>& which, const Readers& readers,
                   const data::Relevance& relevance, const std::vector<int64_t>& queries, bool progress) {
  std::vector<Combo> combos;
  for (size_t r : which)
    for (double w : kFusionWeights) combos.push_back(Mix((*rows)[r].x, (*rows)[r].y, w));
  const auto rr = ReciprocalRanksOf(readers, relevance, queries, combos, "[choose] weights", progress);
  constexpr size_t kGrid = std::size(kFusionWeights);
  for (size_t i = 0; i < which.size(); ++i) {
    std::vector<double> mrr;
    for (size_t g = 0; g < kGrid; ++g) mrr.push_back(Mean(rr[i * kGrid + g]));
    (*rows)[which[i]].weight = kFusionWeights[FirstBest(mrr)];
  }
}

// The label-free proxy's MRR per dense reader: each sampled document with two
// windows or more is cut into its first and second half of windows; its
// first half, read by the reader, must find its own second half among the
// second halves of every such document. `pick` receives the reader of the
// highest MRR (-1 when there are too few documents to match).
nlohmann::json Proxy(const Readers& readers, const ChooseOptions& options, int* pick) {
  *pick = -1;
  std::vector<int64_t> long_documents;
  for (int64_t d = 0; d < readers.N; ++d)
    if (readers.windows[d].vectors.size(0) >= 2) long_documents.push_back(d);
  nlohmann::json out = {{"documents_with_two_windows", long_documents.size()}};
  if (long_documents.size() < kFewestProxyDocuments) {
    out["skipped"] = "fewer than " + std::to_string(kFewestProxyDocuments) +
                     " documents have two windows or more: no halves to match";
    return out;
  }
  std::vector<model::DocumentSentences> firsts, seconds;  // per long document, (W_d / 2 or so, D) each
  for (int64_t d : long_documents) {
    const torch::Tensor& w = readers.windows[d].vectors;
    const int64_t h = w.size(0) / 2;
    firsts.push_back({w.slice(0, 0, h), {0, h}});
    seconds.push_back({w.slice(0, h), {0, w.size(0) - h}});
  }
  std::vector<int64_t> sample(long_documents.size());  // into the long documents
  std::iota(sample.begin(), sample.end(), 0);
  data::KeyedRandom random(options.seed, {0x70726f7879ULL /* "proxy" */});
  random.Shuffle(&sample);
  if (options.proxy_documents > 0 && static_cast<int64_t>(sample.size()) > options.proxy_documents)
    sample.resize(options.proxy_documents);
  std::sort(sample.begin(), sample.end());
  std::vector<model::DocumentSentences> sampled_firsts;
  for (int64_t s : sample) sampled_firsts.push_back(firsts[s]);
  const int64_t M = static_cast<int64_t>(seconds.size()), S = static_cast<int64_t>(sample.size());
  const torch::Tensor relevant = torch::zeros({S, M}, torch::kBool)  // (S, M): each sample's own second half
                                     .index_put_({torch::arange(S, torch::kInt64), torch::tensor(sample)},
                                                 torch::ones({S}, torch::kBool));
  const auto [first_rows, first_owner] = Stacked(sampled_firsts);
  const auto [second_rows, second_owner] = Stacked(seconds);
  nlohmann::json by_reader = nlohmann::json::object();
  int best = kFirst;
  double best_mrr = -1;
  for (int base : kDense) {
    torch::Tensor scores;  // (S, M)
    if (base == kMaxSim) {
      const SentencePool pool(seconds);
      std::vector<const model::DocumentSentences*> sources;
      for (const auto& part : sampled_firsts) sources.push_back(&part);
      scores = torch::stack(pool.Scores(sources, /*normalize=*/false)).to(torch::kFloat64);
    } else if (base == kFirst) {
      std::vector<torch::Tensor> q, c;
      for (const auto& part : sampled_firsts) q.push_back(part.vectors[0]);
      for (const auto& part : seconds) c.push_back(part.vectors[0]);
      scores = torch::stack(q).matmul(torch::stack(c).t());
    } else {
      const std::string pooling = kBaseInfo[base].window_pooling;
      scores = model::PoolRowsByDocument(first_rows, first_owner, S, pooling)
                   .matmul(model::PoolRowsByDocument(second_rows, second_owner, M, pooling).t());
    }
    const double mrr = model::ReciprocalRanks(scores, relevant).mean().item<double>();
    by_reader[kBaseInfo[base].slug] = {{"name", kBaseInfo[base].name}, {"mrr", mrr}};
    if (mrr > best_mrr) {
      best_mrr = mrr;
      best = base;
    }
  }
  out["matched_documents"] = S;
  out["readers"] = by_reader;
  out["pick"] = kBaseInfo[best].slug;
  *pick = best;
  return out;
}

// `path` as one shell word.
std::string Quoted(const std::string& path) {
  const bool plain = !path.empty() && std::all_of(path.begin(), path.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string("_./:=@+,-").find(static_cast<char>(c)) != std::string::npos;
  });
  if (plain) return path;
  std::string quoted = "'";
  for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A model folder reading as `base` does: the given folder's files with
// config.json's window settings replaced, and its checksums recorded anew.
// Of a checkpoint's files only the weights and the tokenizer are copied.
std::string WriteReaderModel(const std::string& given, io::ModelFolderInfo info, int base, int64_t windows,
                             const std::string& output, const std::string& prefix) {
  const std::string folder = output + "/models/" + prefix + kBaseInfo[base].slug;
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const std::string& name : {info.weights, info.tokenizer, std::string("import.json")}) {
    if (!name.empty() && fs::is_regular_file(fs::path(given) / name))
      fs::copy_file(fs::path(given) / name, fs::path(folder) / name);
  }
  info.config.match_bert.chunks = base == kFirst ? 1 : windows;
  info.config.match_bert.window_pooling = kBaseInfo[base].window_pooling;
  info.stage = "choose";
  io::WriteModelFolderInfo(folder, info);
  io::WriteChecksums(folder);
  return folder;
}

// The commands that embed, evaluate, search and export with `row`; its
// readers' model folders go to <output>/models/ and into `models`.
std::vector<std::string> RecipeCommands(const Row& row, const ChooseOptions& options, const std::string& model_folder,
                                        const io::ModelFolderInfo& info, const std::string& example_id,
                                        nlohmann::json* models) {
  const Combo c = row.combo();
  const std::string out = options.output + "/recipe";
  std::vector<int> dense;
  double dense_total = 0;
  for (int b : kDense) {
    if (c[b] == 0) continue;
    dense.push_back(b);
    dense_total += c[b];
  }
  int lexical = -1;
  for (int b : kLexical)
    if (c[b] != 0) lexical = b;
  if (dense.empty()) dense.push_back(kFirst);  // a lexical reader alone is its hybrid at weight 1 over some vectors
  std::vector<std::string> commands, files;
  for (int b : dense) {
    const std::string prefix = row.tuned ? "tuned-" : "";
    const std::string folder = WriteReaderModel(model_folder, info, b, options.windows, options.output, prefix);
    (*models)[kBaseInfo[b].slug] = folder;
    files.push_back(out + "/" + prefix + kBaseInfo[b].slug + ".h5");
    commands.push_back("docmatch embed --model " + Quoted(folder) + " --corpus " + Quoted(options.corpus) +
                       " --output " + Quoted(files.back()) + " --overwrite");
  }
  std::string vectors = files.front(),
              model_flag = " --model " + Quoted((*models)[kBaseInfo[dense.front()].slug].get<std::string>());
  if (dense.size() > 1) {
    vectors = out + "/fused.h5";
    std::string fuse = "docmatch fuse";
    for (const std::string& file : files) fuse += " --embeddings " + Quoted(file);
    for (int b : dense) fuse += " --weight " + Weight(c[b] / dense_total);
    commands.push_back(fuse + " --output " + Quoted(vectors) + " --overwrite");
    model_flag = "";  // a fused file is read without a model
  }
  const std::string lexical_flags =
      lexical < 0 ? "" : std::string(" --lexical ") + kBaseInfo[lexical].slug + " --lexical-weight " + Weight(c[lexical]);
  commands.push_back("docmatch eval" + model_flag + " --corpus " + Quoted(options.corpus) + " --embeddings " +
                     Quoted(vectors) + " --relevance " + Quoted(options.relevance) + lexical_flags +
                     " --write-rankings 10 --output " + Quoted(out + "/eval"));
  commands.push_back("docmatch search --embeddings " + Quoted(vectors) + " --id " + Quoted(example_id) + " --top 10" +
                     lexical_flags);
  if (dense.size() == 1 && dense.front() == kFirst) {
    commands.push_back("docmatch export --model " + Quoted((*models)["first"].get<std::string>()) + " --output " +
                       Quoted(out + "/sentence-transformers") + " --overwrite");
  }
  return commands;
}

// The relevance list's queries with a relevant document besides
// themselves, shuffled (seeded) and cut to --max-queries; `available`
// receives how many there were.
std::vector<int64_t> MeasurableQueries(const data::Relevance& relevance, const ChooseOptions& options,
                                       int64_t* available) {
  std::vector<int64_t> queries;
  for (const auto& [query, judged] : relevance) {
    const std::vector<int64_t> relevant = data::RelevantDocuments(judged);
    if (std::any_of(relevant.begin(), relevant.end(), [q = query](int64_t d) { return d != q; }))
      queries.push_back(query);
  }
  data::KeyedRandom random(options.seed, {0x63686f6f7365ULL /* "choose" */});
  random.Shuffle(&queries);
  *available = static_cast<int64_t>(queries.size());
  if (options.max_queries > 0 && *available > options.max_queries) queries.resize(options.max_queries);
  if (queries.size() < kFewestQueries) {
    throw Error("choose", options.relevance + " gives " + std::to_string(queries.size()) +
                              " queries with a relevant document other than themselves: too few to choose by (" +
                              std::to_string(kFewestQueries) +
                              " or more, half to choose fusion weights on and half to measure)");
  }
  return queries;
}

// The rows: each base alone, each dense reader with each lexical one, and
// every two dense readers (their weights chosen later). `pairs` receives the
// last kind's rows.
std::vector<Row> Rows(std::vector<size_t>* free, std::vector<size_t>* pairs) {
  std::vector<Row> rows;
  for (int b = 0; b < kBases; ++b) rows.push_back({kBaseInfo[b].name, kBaseInfo[b].slug, Only(b), {}, 0, false});
  const auto fused = [&](int x, int y) {
    free->push_back(rows.size());
    rows.push_back({std::string(kBaseInfo[x].name) + " + " + kBaseInfo[y].name,
                    std::string(kBaseInfo[x].slug) + "+" + kBaseInfo[y].slug, Only(x), Only(y), 0, true});
  };
  for (int d : kDense)
    for (int l : kLexical) fused(d, l);
  for (size_t i = 0; i < std::size(kDense); ++i) {
    for (size_t j = i + 1; j < std::size(kDense); ++j) {
      pairs->push_back(rows.size());
      fused(kDense[i], kDense[j]);
    }
  }
  return rows;
}

// Each row's measured ranks as rankings/<slug>.jsonl, and its line of the choice.
nlohmann::json RowsJson(const std::vector<Row>& rows, const std::vector<std::vector<double>>& rr,
                        const PairedBootstrap& intervals, size_t best, const std::vector<int64_t>& measured,
                        const std::vector<std::string>& ids, const ChooseOptions& options) {
  const std::string& output = options.output;
  fs::create_directories(output + "/rankings");
  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return Mean(rr[a]) > Mean(rr[b]); });
  nlohmann::json rows_json = nlohmann::json::array();
  for (size_t r : order) {
    std::string ranks;
    for (size_t i = 0; i < measured.size(); ++i) {
      ranks += nlohmann::json{{"query", ids[measured[i]]},
                              {"first_relevant_rank", static_cast<int64_t>(std::llround(1 / rr[r][i]))}}
                   .dump() +
               "\n";
    }
    const std::string file = output + "/rankings/" + rows[r].slug + ".jsonl";
    files::ReplaceFile(file, ranks);
    const Interval& row = intervals.rows[r];
    const Interval& gap = intervals.minus_reference[r];
    nlohmann::json weights = nlohmann::json::object();
    const Combo c = rows[r].combo();
    for (int b = 0; b < kBases; ++b)
      if (c[b] != 0) weights[kBaseInfo[b].slug] = std::round(c[b] * 1e9) / 1e9;  // 0.09, not 0.09000000000000002
    // A fused row whose weight came out 0 or 1 is a row before it.
    std::string same_as;
    for (size_t earlier = 0; earlier < r && same_as.empty(); ++earlier)
      if (rows[earlier].combo() == c && (rows[earlier].tuned == rows[r].tuned || ReadingCost(c, 1) < 1))
        same_as = rows[earlier].name;  // (lexical readers alone read no model)
    rows_json.push_back({{"name", rows[r].name},
                         {"slug", rows[r].slug},
                         {"weights", weights},
                         {"same_as", same_as},
                         {"cost", ReadingCost(c, options.windows)},
                         {"mrr", row.mean},
                         {"interval", {row.low, row.high}},
                         {"minus_best", gap.mean},
                         {"minus_best_interval", {gap.low, gap.high}},
                         {"within_best_interval", r == best || gap.high >= 0},
                         {"rankings", file}});
  }
  return rows_json;
}

// Whether the proxy's pick is the labelled best dense reader, or within its interval.
void CompareProxy(nlohmann::json* proxy, int pick, const std::vector<std::vector<double>>& rr,
                  const ChooseOptions& options) {
  std::vector<std::vector<double>> dense;  // the dense readers alone, in kDense's order
  std::vector<double> mrr;
  for (int b : kDense) {
    dense.push_back(rr[b]);  // the first rows are the bases alone, in Base order
    mrr.push_back(Mean(rr[b]));
  }
  const size_t labelled = FirstBest(mrr);
  const size_t picked = static_cast<size_t>(pick);  // kDense[i] == i
  const PairedBootstrap b = Bootstrap(dense, labelled, options.resamples,
                                      SeededResampler(static_cast<int64_t>(rr[0].size()), options.seed));
  (*proxy)["labelled_pick"] = kBaseInfo[kDense[labelled]].slug;
  (*proxy)["pick_minus_labelled"] = b.minus_reference[picked].mean;
  (*proxy)["pick_minus_labelled_interval"] = {b.minus_reference[picked].low, b.minus_reference[picked].high};
  (*proxy)["agrees"] = picked == labelled || b.minus_reference[picked].high >= 0;
}

// What a windows file was embedded from: the model's weights (the CRC of its
// checksums record, or of the weights file where it has none), the corpus
// (its manifest: counts, tokenizer and the preparation's report, which a
// preparation anew changes), the windows a document and their tokens. A
// later run with the same key reads the file instead of embedding again.
nlohmann::json WindowsKey(const ChooseOptions& options, const io::ModelFolderInfo& info) {
  const fs::path checksums = fs::path(options.model) / io::kChecksumFile;
  return {{"model", fs::absolute(options.model).lexically_normal().string()},
          {"model_crc32", io::Crc32Of(fs::exists(checksums) ? checksums : fs::path(options.model) / info.weights)},
          {"corpus", fs::absolute(options.corpus).lexically_normal().string()},
          {"corpus_manifest_crc32", io::Crc32Of(fs::path(options.corpus) / data::kManifestFile)},
          {"windows", options.windows},
          {"window_tokens", info.config.match_bert.max_tokens}};
}

// The seconds the pass that embedded <output>/windows.h5 from `key` took, or
// -1 when the file is not that pass's whole output (or the record is unreadable).
double WindowsFileMatches(const std::string& windows_file, const std::string& key_file, const nlohmann::json& key) {
  if (!fs::exists(windows_file) || !fs::exists(key_file)) return -1;
  std::ifstream in(key_file);
  const nlohmann::json recorded = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!recorded.is_object() || !recorded.contains("embedded_from") || recorded["embedded_from"] != key) return -1;
  const auto seconds = recorded.find("seconds");
  return seconds != recorded.end() && seconds->is_number() ? std::max(0.0, seconds->get<double>()) : 0.0;
}

// The related pairs of the `choosing` queries, as a pairs file of the corpus
// for fine-tuning: each query with each of its relevant documents, leaving
// out every pair that touches a measured query (its vectors then move only as
// any unseen document's do). Returns the number of pairs.
int64_t WriteTrainingPairs(const data::Relevance& relevance, const std::vector<int64_t>& choosing,
                           const std::vector<int64_t>& measured, const std::vector<std::string>& ids,
                           const std::string& path) {
  const std::set<int64_t> held_out(measured.begin(), measured.end());
  std::string lines;
  int64_t count = 0;
  for (int64_t q : choosing) {
    for (int64_t d : data::RelevantDocuments(relevance.at(q))) {
      if (d == q || held_out.count(d) > 0) continue;
      lines += nlohmann::json{{"source", ids[q]}, {"target", ids[d]}, {"label", 1}}.dump() + "\n";
      ++count;
    }
  }
  files::ReplaceFile(path, lines);
  return count;
}

// The model of `folder` reading every document's windows, as a maxsim model keeps them.
std::unique_ptr<model::DocumentModel> WindowsModel(const std::string& folder, const io::ModelFolderInfo& info,
                                                   int64_t windows, const torch::Device& device) {
  io::ModelFolderInfo windows_info = info;
  windows_info.config.match_bert.chunks = windows;
  windows_info.config.match_bert.window_pooling = "maxsim";
  std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(windows_info.config);
  io::LoadFolderWeights(model->module(), folder, info);
  model->module().to(device);
  model->module().eval();
  return model;
}

}  // namespace

nlohmann::json RunChoose(const ChooseOptions& options, dist::ProcessGroup& group, const FineTuner& tune) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const auto within_budget = [&] { return options.budget_seconds <= 0 || elapsed() < options.budget_seconds; };
  const data::Corpus corpus(options.corpus);
  const io::ModelFolderInfo info = io::ReadModelFolderInfo(options.model);
  if (info.config.kind != "match_bert" || info.config.match_bert.window_pooling == "attention") {
    throw Error("choose", "'" + options.model + "' is a " + info.config.kind +
                              (info.config.kind == "match_bert" ? " model with learned (attention) window pooling"
                                                                : " model") +
                              "; choose reads with a flat encoder's windows: give the model it was imported from "
                              "(docmatch import-hf <folder> --output models/flat)");
  }
  io::CheckTokenizer(info, corpus, options.model);
  DOCMATCH_CHECK(options.windows >= 1, "choose", "--windows must be at least 1, not ", options.windows);
  DOCMATCH_CHECK(options.resamples >= 1, "choose", "--resamples must be at least 1, not ", options.resamples);
  DOCMATCH_CHECK(options.finetune_steps == 0 || tune, "choose", "fine-tuning needs the training code (docmatch choose)");
  const data::Relevance relevance = data::ReadRelevance(options.relevance, corpus);
  int64_t available = 0;
  const std::vector<int64_t> queries = MeasurableQueries(relevance, options, &available);
  std::vector<int64_t> choosing(queries.begin(), queries.begin() + queries.size() / 2),
      measured(queries.begin() + queries.size() / 2, queries.end());
  std::sort(choosing.begin(), choosing.end());
  std::sort(measured.begin(), measured.end());
  const std::vector<std::string> ids = corpus.Ids();

  // One embedding pass: every document's windows, as a maxsim model keeps
  // them; an earlier run's of the same model, corpus and windows are read
  // again (rank 0 decides for all).
  fs::create_directories(options.output);
  const std::string windows_file = options.output + "/windows.h5", key_file = options.output + "/windows.json";
  const bool progress = options.progress && group.rank() == 0;
  const nlohmann::json key = WindowsKey(options, info);
  std::vector<int64_t> earlier_ms = {
      group.rank() == 0 ? static_cast<int64_t>(1000 * WindowsFileMatches(windows_file, key_file, key)) : 0};
  group.control().Broadcast(earlier_ms, 0);
  const bool reuse = earlier_ms[0] >= 0;
  double pass_seconds = earlier_ms[0] / 1000.0;  // what embedding the corpus takes
  if (reuse) {
    if (group.rank() == 0) {
      std::cerr << "[choose] reading the windows an earlier run embedded from the same model, corpus and --windows ("
                << windows_file << "); remove it to embed again\n";
    }
  } else {
    if (group.rank() == 0) fs::remove(key_file);
    group.control().Barrier();
    const auto model = WindowsModel(options.model, info, options.windows, group.device());
    EmbedCorpus(*model, options.model, corpus, windows_file, options.batch_size, progress, group);
    pass_seconds = elapsed();
    if (group.rank() == 0)
      files::ReplaceFile(key_file, nlohmann::json{{"embedded_from", key}, {"seconds", pass_seconds}}.dump(2) + "\n");
  }
  const double embed_seconds = elapsed();

  // Rank 0 measures the untrained rows and the proxy first, so that
  // fine-tuning gets what the budget leaves after them. A failure there is
  // told to every rank before the collectives below.
  std::optional<Readers> readers;
  std::vector<Row> rows;
  std::vector<std::vector<double>> rr;
  nlohmann::json not_run = nlohmann::json::array(), proxy;
  double scoring_seconds = 0;
  std::exception_ptr failed;
  if (group.rank() == 0) {
    try {
      torch::NoGradGuard no_grad;
      readers.emplace(ReadWindows(windows_file, corpus, progress));
      // Weights on one half; the rows of two dense readers with TF-IDF while the budget lasts.
      std::vector<size_t> free, pairs;
      rows = Rows(&free, &pairs);
      ChooseWeights(&rows, free, *readers, relevance, choosing, progress);
      if (within_budget()) {
        std::vector<size_t> triples;
        for (size_t p : pairs) {
          triples.push_back(rows.size());
          rows.push_back({rows[p].name + " (" + Weight(1 - rows[p].weight) + ":" + Weight(rows[p].weight) +
                              ") + TF-IDF",
                          rows[p].slug + "+tfidf", rows[p].combo(), Only(kTfidf), 0, true});
        }
        ChooseWeights(&rows, triples, *readers, relevance, choosing, progress);
      } else {
        not_run.push_back("two dense readers with TF-IDF");
      }
      // Every row on the other half.
      std::vector<Combo> combos;
      for (const Row& row : rows) combos.push_back(row.combo());
      rr = ReciprocalRanksOf(*readers, relevance, measured, combos, "[choose] measuring", progress);
      // Beside the labels, the proxy that needs none.
      if (within_budget()) {
        int pick = -1;
        proxy = Proxy(*readers, options, &pick);
        if (pick >= 0) CompareProxy(&proxy, pick, rr, options);
      } else {
        not_run.push_back("the label-free proxy");
      }
      scoring_seconds = elapsed() - embed_seconds;
    } catch (...) {
      failed = std::current_exception();
    }
  }

  // Fine-tuning on the choosing half's links (--finetune), for what the
  // budget leaves after a second embedding pass, the fine-tuned rows' scoring
  // (about half the rows above) and a few seconds to load and checkpoint.
  nlohmann::json finetune;
  std::string tuned_folder, tuned_windows;
  const std::string pairs_file = options.output + "/finetune-pairs.jsonl";
  std::vector<int64_t> plan = {0, 0, 0};  // pairs; ms left for training (0: no limit, -1: none); rank 0 failed
  if (group.rank() == 0) {
    try {
      if (!failed && options.finetune_steps > 0) {
        plan[0] = WriteTrainingPairs(relevance, choosing, measured, ids, pairs_file);
        constexpr double kLoadAndCheckpoint = 5;
        const double left =
            options.budget_seconds - elapsed() - pass_seconds - scoring_seconds / 2 - kLoadAndCheckpoint;
        plan[1] = options.budget_seconds <= 0 ? 0 : left <= 0 ? -1 : std::max<int64_t>(1, std::llround(1000 * left));
      }
    } catch (...) {
      failed = std::current_exception();
    }
    plan[2] = failed ? 1 : 0;
  }
  group.control().Broadcast(plan, 0);
  if (failed) std::rethrow_exception(failed);
  if (plan[2] != 0) throw Error("choose", "rank 0 failed while measuring the rows (its message says why)");
  if (options.finetune_steps > 0) {
    finetune = {{"pairs", plan[0]}, {"pairs_file", pairs_file}, {"steps_asked", options.finetune_steps}};
    if (plan[1] < 0) {
      finetune["skipped"] = "the budget left no time for training and a second embedding pass";
      finetune["out_of_budget"] = true;
    } else if (plan[0] < group.size()) {
      finetune["skipped"] = "the choosing queries give " + std::to_string(plan[0]) +
                            " related pairs outside the measured queries: too few to train on";
    } else {
      const auto trained_from = std::chrono::steady_clock::now();
      const TunedModel tuned = tune(pairs_file, plan[0], options.output + "/finetune", plan[1] / 1000.0);
      finetune["steps"] = tuned.steps;
      finetune["out_of_time"] = tuned.out_of_time;
      finetune["model"] = tuned.folder;
      finetune["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - trained_from).count();
      tuned_folder = tuned.folder;
      tuned_windows = options.output + "/windows-finetuned.h5";
      const io::ModelFolderInfo tuned_info = io::ReadModelFolderInfo(tuned_folder);
      const auto model = WindowsModel(tuned_folder, tuned_info, options.windows, group.device());
      EmbedCorpus(*model, tuned_folder, corpus, tuned_windows, options.batch_size, progress, group);
    }
  }
  if (group.rank() != 0) return nullptr;
  torch::NoGradGuard no_grad;
  if (!tuned_folder.empty()) {
    // The fine-tuned model's dense readers, alone and with each lexical one
    // (weights chosen on the queries it was trained on).
    const Readers tuned = ReadWindows(tuned_windows, corpus, progress, &*readers);
    std::vector<Row> tuned_rows;
    std::vector<size_t> tuned_free;
    for (int d : kDense) {
      tuned_rows.push_back({std::string("fine-tuned ") + kBaseInfo[d].name, std::string("tuned-") + kBaseInfo[d].slug,
                            Only(d), {}, 0, false, true});
    }
    for (int d : kDense) {
      for (int l : kLexical) {
        tuned_free.push_back(tuned_rows.size());
        tuned_rows.push_back({std::string("fine-tuned ") + kBaseInfo[d].name + " + " + kBaseInfo[l].name,
                              std::string("tuned-") + kBaseInfo[d].slug + "+" + kBaseInfo[l].slug, Only(d), Only(l), 0,
                              true, true});
      }
    }
    ChooseWeights(&tuned_rows, tuned_free, tuned, relevance, choosing, progress);
    std::vector<Combo> tuned_combos;
    for (const Row& row : tuned_rows) tuned_combos.push_back(row.combo());
    auto tuned_rr = ReciprocalRanksOf(tuned, relevance, measured, tuned_combos, "[choose] measuring fine-tuned",
                                      progress);
    rows.insert(rows.end(), tuned_rows.begin(), tuned_rows.end());
    rr.insert(rr.end(), tuned_rr.begin(), tuned_rr.end());
  }
  std::vector<double> mrr;
  for (const auto& ranks : rr) mrr.push_back(Mean(ranks));
  const size_t best = FirstBest(mrr);
  const PairedBootstrap intervals = Bootstrap(
      rr, best, options.resamples, SeededResampler(static_cast<int64_t>(measured.size()), options.seed));
  size_t cheapest = best;  // of the rows within the best's interval; the higher MRR among equal costs
  for (size_t r = 0; r < rows.size(); ++r) {
    const double cost = ReadingCost(rows[r].combo(), options.windows),
                 cheapest_cost = ReadingCost(rows[cheapest].combo(), options.windows);
    if (intervals.minus_reference[r].high >= 0 && (cost < cheapest_cost || (cost == cheapest_cost && mrr[r] > mrr[cheapest])))
      cheapest = r;
  }
  const size_t chosen = options.prefer == "cheapest" ? cheapest : best;
  nlohmann::json choice = {
      {"corpus", options.corpus},
      {"model", options.model},
      {"relevance", options.relevance},
      {"documents", readers->N},
      {"windows_per_document", options.windows},
      {"window_tokens", info.config.match_bert.max_tokens},
      {"windows_read", std::accumulate(readers->windows.begin(), readers->windows.end(), int64_t{0},
                                       [](int64_t n, const auto& d) { return n + d.vectors.size(0); })},
      {"queries",
       {{"with_relevant_documents", available}, {"choosing_weights", choosing.size()}, {"measured", measured.size()}}},
      {"seed", options.seed},
      {"resamples", options.resamples},
      {"rows", RowsJson(rows, rr, intervals, best, measured, ids, options)},
      {"best", rows[best].slug},
      {"cheapest_within_best_interval", rows[cheapest].slug},
      {"prefer", options.prefer},
      {"chosen", rows[chosen].slug},
  };

  if (!proxy.is_null()) choice["proxy"] = proxy;
  if (!finetune.is_null()) {
    if (finetune.value("out_of_budget", false)) not_run.push_back("fine-tuning");
    choice["finetune"] = finetune;
  }
  if (!not_run.empty()) choice["not_run_for_the_budget"] = not_run;

  // The recipe of the chosen row.
  nlohmann::json models = nlohmann::json::object();
  const bool tuned_choice = rows[chosen].tuned;
  const std::vector<std::string> commands =
      RecipeCommands(rows[chosen], options, tuned_choice ? tuned_folder : options.model,
                     tuned_choice ? io::ReadModelFolderInfo(tuned_folder) : info, ids[measured.front()], &models);
  std::string script = "#!/usr/bin/env bash\n# " + rows[chosen].name + ": chosen by docmatch choose on " +
                       options.corpus + " (MRR " + Weight(intervals.rows[chosen].mean) + " on " +
                       std::to_string(measured.size()) + " held-out queries)\nset -euo pipefail\nmkdir -p " +
                       Quoted(options.output + "/recipe") + "\n";
  for (const std::string& command : commands) script += command + "\n";
  files::ReplaceFile(options.output + "/recipe.sh", script);
  fs::permissions(options.output + "/recipe.sh", fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  choice["recipe"] = {{"models", models}, {"commands", commands}, {"script", options.output + "/recipe.sh"}};
  choice["seconds"] = {{"embedding", embed_seconds}, {"total", elapsed()}};
  choice["windows_reused"] = reuse;
  files::ReplaceFile(options.output + "/choice.json", choice.dump(2) + "\n");
  return choice;
}

std::string ChoiceTable(const nlohmann::json& choice) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3);
  const auto& q = choice["queries"];
  out << "[choose] " << choice["documents"].get<int64_t>() << " documents read as up to "
      << choice["windows_per_document"].get<int64_t>() << " windows of " << choice["window_tokens"].get<int64_t>()
      << " tokens (" << choice["windows_read"].get<int64_t>() << " windows); " << q["measured"].get<int64_t>()
      << " queries measured, " << q["choosing_weights"].get<int64_t>() << " others chose the fusion weights\n";
  out << "  rank  MRR    95% interval    minus the best (95%)       reader [weights]\n";
  int rank = 0;
  for (const auto& row : choice["rows"]) {
    const auto& i = row["interval"];
    const auto& g = row["minus_best_interval"];
    std::ostringstream gap;
    gap << std::fixed << std::setprecision(3);
    if (row["slug"] == choice["best"]) {
      gap << "the best";
    } else {
      gap << std::showpos << row["minus_best"].get<double>() << " (" << g[0].get<double>() << " to "
          << g[1].get<double>() << ")" << (row["within_best_interval"].get<bool>() ? " ~" : "");
    }
    std::string name = row["name"].get<std::string>();
    if (!row["same_as"].get<std::string>().empty()) {
      name += " (= " + row["same_as"].get<std::string>() + ")";
    } else if (row["weights"].size() > 1) {
      name += " [";
      bool first = true;
      for (const auto& [slug, weight] : row["weights"].items()) {
        name += (first ? "" : ", ") + slug + " " + Weight(weight.get<double>());
        first = false;
      }
      name += "]";
    }
    out << "  " << std::setw(4) << std::left << ++rank << std::right << "  " << row["mrr"].get<double>() << "  ("
        << i[0].get<double>() << "-" << i[1].get<double>() << ")  " << std::setw(26) << std::left << gap.str()
        << std::right << " " << name << "\n";
  }
  out << "  ~: within the best's interval (the difference's interval reaches 0)\n";
  if (choice.contains("proxy")) {
    const auto& p = choice["proxy"];
    if (p.contains("pick")) {
      out << "[choose] without labels (each document's first half of windows finding its second half, "
          << p["matched_documents"].get<int64_t>() << " documents):";
      for (const auto& [slug, reader] : p["readers"].items()) out << " " << slug << " " << reader["mrr"].get<double>();
      out << "; it picks " << p["pick"].get<std::string>() << ", the labels pick "
          << p["labelled_pick"].get<std::string>()
          << (p["agrees"].get<bool>() ? " (agrees: within its interval)" : " (disagrees: outside its interval)") << "\n";
    } else {
      out << "[choose] without labels: " << p["skipped"].get<std::string>() << "\n";
    }
  }
  if (choice.contains("finetune")) {
    const auto& f = choice["finetune"];
    if (f.contains("skipped")) {
      out << "[choose] not fine-tuned: " << f["skipped"].get<std::string>() << "\n";
    } else {
      out << "[choose] fine-tuned on " << f["pairs"].get<int64_t>() << " related pairs of the choosing queries: "
          << f["steps"].get<int64_t>() << " of " << f["steps_asked"].get<int64_t>() << " steps"
          << (f["out_of_time"].get<bool>() ? " (the budget ran out)" : "") << " in " << std::setprecision(1)
          << f["seconds"].get<double>() << std::setprecision(3) << " s (" << f["model"].get<std::string>()
          << "); its rows are the fine-tuned ones\n";
    }
  }
  if (choice.contains("not_run_for_the_budget")) {
    out << "[choose] not run within --budget:";
    for (const auto& what : choice["not_run_for_the_budget"]) out << " " << what.get<std::string>() << ";";
    out << "\n";
  }
  const auto row_named = [&](const nlohmann::json& slug) {
    for (const auto& row : choice["rows"])
      if (row["slug"] == slug) return row;
    return nlohmann::json();
  };
  const nlohmann::json cheapest = row_named(choice["cheapest_within_best_interval"]);
  out << "[choose] the best: " << choice["best"].get<std::string>() << "; the cheapest within its interval: "
      << cheapest["slug"].get<std::string>() << " (MRR " << cheapest["mrr"].get<double>() << ", cost "
      << std::setprecision(1) << cheapest["cost"].get<double>() << std::setprecision(3)
      << " windows a document)\n[choose] chosen (--prefer " << choice["prefer"].get<std::string>()
      << "): " << choice["chosen"].get<std::string>() << "; its commands ("
      << choice["recipe"]["script"].get<std::string>() << "):\n";
  for (const auto& command : choice["recipe"]["commands"]) out << "  " << command.get<std::string>() << "\n";
  out << std::setprecision(1) << "[choose] " << choice["seconds"]["total"].get<double>() << " s, of which "
      << (choice.value("windows_reused", false) ? "reading an earlier run's windows "
                                                : "the embedding pass ")
      << choice["seconds"]["embedding"].get<double>() << " s\n";
  return out.str();
}

}  // namespace docmatch::eval
