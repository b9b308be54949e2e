// `docmatch search`: the documents nearest to a document or a text, from an
// `embed` (or `encode`) file, as a table or JSON lines (eval/search.h).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "console/error.h"
#include "data/corpus/corpus.h"
#include "data/text/prepare.h"
#include "dist/runtime.h"
#include "eval/metrics.h"
#include "eval/search.h"
#include "io/model_folder.h"

namespace docmatch::cli {
namespace {
namespace fs = std::filesystem;

struct SearchFlags {
  std::string embeddings, model, corpus, tokenizer, queries, text, format = "table", device = "auto", index;
  std::string lexical = "tfidf";  // the lexical score of --lexical-weight: tfidf or bm25
  eval::Bm25Parameters bm25;
  bool ann = false;
  bool text_given = false;  // --text, even empty: an empty query is named, not taken for none
  std::vector<std::string> ids;
  eval::SearchOptions options;
};

// What the table shows of a query given as text: its first words, quoted.
std::string Excerpt(const std::string& text) {
  std::string out;
  for (const char c : text) out += (c == '\n' || c == '\t') ? ' ' : c;
  if (out.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    out = out.substr(0, cut) + "...";
  }
  return "\"" + out + "\"";
}

class SearchCommand {
 public:
  explicit SearchCommand(const SearchFlags& flags)
      : flags_(flags), device_(dist::ProcessDevice(flags.device)), file_(flags.embeddings) {
    // The corpus the file was embedded from: titles, the lexical index, and
    // the tokenizer of last resort.
    const std::string corpus = !flags.corpus.empty() ? flags.corpus : file_.corpus();
    if (!corpus.empty() && fs::exists(fs::path(corpus) / data::kManifestFile)) {
      corpus_.emplace(corpus);
    } else if (!flags.corpus.empty()) {
      throw Error("search", "--corpus '" + flags.corpus + "' is not a prepared corpus");
    } else if (!corpus.empty()) {
      LOG(WARNING) << "[search] '" << flags.embeddings << "' was embedded from the corpus '" << corpus
                   << "', which is not there: hits show no titles (give --corpus)";
    }
    // The model: for text queries (loaded when the first one is read), for
    // SMASH's pair head, or when asked for.
    if (!flags.text.empty() || file_.kind() == "smash" || !flags.model.empty()) LoadModel();
    if (flags.options.lexical_weight > 0) {
      if (!corpus_) throw Error("search", "--lexical-weight needs --corpus (the corpus embedded)");
      file_.CheckCorpusOrder(*corpus_, "search", "embed that corpus again for hybrid search");
      if (flags.lexical == "bm25") {
        words_ = std::make_shared<const data::WordCounts>(
            data::WordCounts::OfCorpus(corpus_->directory(), corpus_->num_documents()));
        bm25_ = std::make_unique<eval::Bm25Index>(words_, flags.bm25);
      } else {
        lexical_ = std::make_unique<eval::LexicalIndex>(*corpus_, /*progress=*/false);
      }
    }
  }

  int Run() {
    eval::SearchOptions options = flags_.options;
    std::unique_ptr<eval::AnnIndex> index;
    if (flags_.ann || !flags_.index.empty()) {
      index = std::make_unique<eval::AnnIndex>(
          flags_.index.empty() ? eval::AnnIndex::DefaultPath(file_.path()) : flags_.index, file_);
      options.index = index.get();
    }
    options.bm25 = bm25_.get();
    const std::vector<eval::SearchQuery> queries = Queries();
    if (flags_.format == "trec" && !unlabelled_texts_.empty()) {
      throw Error("search",
                  "--format trec names each query by its id: give text queries as {\"id\": ..., \"text\": "
                  "...} lines of --queries (\"" +
                      Excerpt(queries[*unlabelled_texts_.begin()].label) + "\" has none)");
    }
    const eval::Searcher searcher(file_, model_.get(), lexical_.get(), options, device_);
    const std::vector<std::vector<eval::SearchHit>> results = searcher.Search(queries);
    for (size_t q = 0; q < queries.size(); ++q)
      Print(queries[q], results[q], unlabelled_texts_.count(q) ? Excerpt(queries[q].label) : queries[q].label);
    return 0;
  }

 private:
  void LoadModel() {
    if (model_) return;
    if (file_.kind() == "fused") {
      throw Error("search", "'" + flags_.embeddings +
                                "' fuses several models' vectors (docmatch fuse) and is searched without a model: "
                                "by --id or {\"id\"} lines of --queries, without --model. No one model embeds a "
                                "text into it: search a text in one of the files it fuses");
    }
    const std::string model = !flags_.model.empty() ? flags_.model : file_.model();
    if (model.empty() || !fs::is_directory(model)) {
      throw Error("search", "text queries (and SMASH's pair head) need the model that embedded '" + flags_.embeddings +
                                "': pass --model" +
                                (model.empty() ? "" : " (the file names '" + model + "', which is not a folder)"));
    }
    model_ = io::LoadModelFolder(model, &info_);
    model_->module().to(device_);
    model_->module().eval();
    model_folder_ = model;
  }

  const data::TextEncoder& Encoder() {
    LoadModel();
    if (!encoder_) {
      if (lexical_) io::CheckTokenizer(info_, *corpus_, model_folder_);  // text queries meet the corpus's TF-IDF
      const std::string given = !flags_.tokenizer.empty()            ? flags_.tokenizer
                                : info_.tokenizer.empty() && corpus_ ? corpus_->directory()
                                                                     : "";
      tokenizer_ = std::make_unique<data::Tokenizer>(io::LoadModelTokenizer(model_folder_, info_, given));
      encoder_ = std::make_unique<data::TextEncoder>(*tokenizer_);
    }
    return *encoder_;
  }

  eval::SearchQuery ById(const std::string& id, const std::string& where) const {
    const std::optional<int64_t> row = file_.Row(id);
    if (!row) {
      throw Error("search", where + "no document \"" + id + "\" in '" + flags_.embeddings + "' (" +
                                std::to_string(file_.size()) + " documents)");
    }
    return {id, *row, {}};
  }

  // A text query; `label` is its id when it has one, else the text itself
  // (JSON lines echo it whole, the table an excerpt).
  eval::SearchQuery ByText(const std::string& label, std::string text) {
    data::RawDocument raw;
    raw.id = label == text ? Excerpt(text) : label;  // what a message about it names
    raw.text = std::move(text);
    eval::SearchQuery query{label, -1, {}, {}};
    query.text = Encoder().Encode(std::move(raw), &query.words);
    return query;
  }

  std::vector<eval::SearchQuery> Queries() {
    std::vector<eval::SearchQuery> queries;
    for (const std::string& id : flags_.ids) queries.push_back(ById(id, ""));
    if (flags_.text_given) {
      std::string text = flags_.text;
      if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        throw Error("search", std::string("--text ") +
                                  (flags_.text == "-" ? "- read nothing but blanks from standard input" : "is empty") +
                                  ": give the words to search for");
      }
      queries.push_back(ByText(text, text));
      unlabelled_texts_.insert(queries.size() - 1);
    }
    if (!flags_.queries.empty()) {
      const size_t before = queries.size();
      std::ifstream in(flags_.queries);
      if (!in) throw Error("search", "cannot read --queries '" + flags_.queries + "'");
      std::string line;
      for (int64_t number = 1; std::getline(in, line); ++number) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = flags_.queries + ":" + std::to_string(number) + ": ";
        nlohmann::json record;
        try {
          record = nlohmann::json::parse(line);
        } catch (const nlohmann::json::parse_error& e) {
          throw Error("search", where + "not a JSON object (" + e.what() + ")");
        }
        const bool has_text = record.is_object() && record.contains("text") && record["text"].is_string();
        const bool has_id = record.is_object() && record.contains("id") && record["id"].is_string();
        if (has_text) {
          const std::string text = record["text"].get<std::string>();
          queries.push_back(ByText(has_id ? record["id"].get<std::string>() : text, text));
          if (!has_id) unlabelled_texts_.insert(queries.size() - 1);
        } else if (has_id) {
          queries.push_back(ById(record["id"].get<std::string>(), where));
        } else {
          throw Error("search", where + "expected {\"text\": ...} (a text query) or {\"id\": ...} (a document)");
        }
      }
      if (queries.size() == before) {
        throw Error("search", "--queries '" + flags_.queries +
                                  "' holds no query (it is empty or blank): one JSON object a line, {\"id\": ...} or "
                                  "{\"text\": ...}");
      }
    }
    if (queries.empty()) throw Error("search", "no query: give --id, --text or --queries");
    return queries;
  }

  std::string Title(int64_t row) const {
    if (!corpus_) return "";
    const std::optional<int64_t> index = corpus_->IndexOf(file_.ids()[row]);
    return index ? corpus_->Get(*index).title : "";
  }

  // `shown`: the query's name in the table (an excerpt of an unlabelled text).
  void Print(const eval::SearchQuery& query, const std::vector<eval::SearchHit>& hits, const std::string& shown) const {
    if (flags_.format == "trec") {  // a TREC run: query Q0 document rank score tag
      for (size_t i = 0; i < hits.size(); ++i) {
        std::cout << eval::TrecRunLine(query.label, file_.ids()[hits[i].row], static_cast<int64_t>(i) + 1,
                                       hits[i].score);
      }
      std::cout << std::flush;
      return;
    }
    if (flags_.format == "jsonl") {
      nlohmann::ordered_json out = {{"query", query.label}, {"hits", nlohmann::ordered_json::array()}};
      for (size_t i = 0; i < hits.size(); ++i) {
        out["hits"].push_back({{"rank", i + 1},
                               {"id", file_.ids()[hits[i].row]},
                               {"title", Title(hits[i].row)},
                               {"score", hits[i].score}});
      }
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
      return;
    }
    std::cout << "query: " << shown << "\n";
    size_t width = 2;
    for (const auto& hit : hits) width = std::max(width, file_.ids()[hit.row].size());
    std::cout << "  rank   score  " << std::left << std::setw(static_cast<int>(width)) << "id"
              << (corpus_ ? "  title" : "") << "\n";
    for (size_t i = 0; i < hits.size(); ++i) {
      std::ostringstream line;
      line << "  " << std::right << std::setw(4) << i + 1 << "  " << std::fixed << std::setprecision(4) << std::setw(6)
           << hits[i].score << "  " << std::left << std::setw(static_cast<int>(width)) << file_.ids()[hits[i].row];
      if (corpus_) line << "  " << Title(hits[i].row);
      std::cout << line.str() << "\n";
    }
    std::cout << std::flush;
  }

  const SearchFlags& flags_;
  const torch::Device device_;
  eval::EmbeddingFile file_;
  std::set<size_t> unlabelled_texts_;  // queries that are texts without an id
  std::optional<data::Corpus> corpus_;
  io::ModelFolderInfo info_;
  std::unique_ptr<model::DocumentModel> model_;
  std::string model_folder_;
  std::unique_ptr<eval::LexicalIndex> lexical_;
  std::shared_ptr<const data::WordCounts> words_;
  std::unique_ptr<eval::Bm25Index> bm25_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::TextEncoder> encoder_;
};

}  // namespace

Command AddSearchCommand(CLI::App* app) {
  auto flags = std::make_shared<SearchFlags>();
  CLI::App* sub = app->add_subcommand(
      "search",
      "Find the documents most like a query in an `embed` (or `encode`) file: a document of the\n"
      "file (--id), a text (--text, '-' reads standard input) or a JSONL of queries (--queries:\n"
      "{\"id\"} lines are documents, {\"text\"} lines texts). Exact search: every query against\n"
      "every vector, a block at a time, with the score `eval` ranks by (cosine; SMASH's pair\n"
      "head; SDR re-ranks the best --rerank by its hierarchical score, a maxsim model's\n"
      "file by MaxSim over its windows). Titles come from the corpus the file was embedded\n"
      "from; texts are tokenized as `prepare` does, with the model's tokenizer.\n"
      "  docmatch search --embeddings runs/wiki/embeddings.h5 --id Absolute_zero\n"
      "  docmatch search --embeddings runs/wiki/embeddings.h5 --text 'glaciers of the last ice age' --top 5\n"
      "  docmatch search --embeddings vectors.h5 --queries queries.jsonl --format jsonl > hits.jsonl");
  sub->add_option("--embeddings", flags->embeddings, "HDF5 file written by `embed`, `eval` or `encode`")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--id", flags->ids, "a document of the file to find neighbours of (repeatable)");
  sub->add_option("--text", flags->text, "a text query ('-': read it from standard input)");
  sub->add_option("--queries", flags->queries, "JSONL of queries: {\"id\": ...} or {\"text\": ..., \"id\": label}")
      ->check(CLI::ExistingFile);
  sub->add_option("--top", flags->options.top, "hits per query")->capture_default_str()->check(Positive());
  flags->options.exclude_self = true;
  sub->add_flag("--exclude-self,!--include-self", flags->options.exclude_self,
                "a document query (--id, {\"id\"}) leaves itself out of its hits (the default); --include-self "
                "keeps it, usually first");
  sub->add_option("--model", flags->model,
                  "model folder for text queries (default: the folder the file names, when it exists)")
      ->check(ModelFolder());
  sub->add_option("--corpus", flags->corpus, "corpus for titles and hybrid scores (default: the one the file names)")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--tokenizer", flags->tokenizer,
                  "corpus folder (or tokenizer file) for text queries when the model folder carries none");
  CLI::Option* weight = sub->add_option("--lexical-weight", flags->options.lexical_weight,
                                        "hybrid: (1 - w) x cosine + w x the lexical score (--lexical), as in `eval`")
                            ->capture_default_str()
                            ->check(InRange(0.0, 1.0));
  AddLexicalFlags(sub, weight, &flags->lexical, &flags->bm25);
  sub->add_option("--rerank", flags->options.rerank, "SDR and maxsim: candidates their score re-orders")
      ->capture_default_str()
      ->check(Positive());
  sub->add_flag("--sdr-normalize,!--no-sdr-normalize", flags->options.sdr_normalize,
                "SDR: z-score over the candidates (the paper's step, on by default)");
  sub->add_option("--block-rows", flags->options.block_rows, "vectors scored at a time (bounds the memory)")
      ->capture_default_str()
      ->check(Positive());
  sub->add_flag("--ann", flags->ann,
                "approximate: the HNSW index `docmatch index` built beside the file (<embeddings>.hnsw) gives the\n"
                "nearest cosines without reading every vector (bench/NOTES.md: where it pays, its recall)");
  sub->add_option("--index", flags->index, "an HNSW index built elsewhere (implies --ann)")->check(CLI::ExistingFile);
  sub->add_option("--batch-size", flags->options.batch_size, "text queries embedded at a time (as embed's)")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--ef", flags->options.ef, "--ann: candidates kept while searching; more = higher recall, slower")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--format", flags->format,
                  "table; jsonl: {\"query\", \"hits\": [{rank, id, title, score}]}; or trec: a TREC run, `query Q0 "
                  "id rank score docmatch` a line, as trec_eval, ranx and ir-measures read")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "jsonl", "trec"}));
  AddDeviceFlag(sub, &flags->device);
  return {sub, [flags, sub] {
            flags->text_given = sub->count("--text") > 0;
            return SearchCommand(*flags).Run();
          }};
}

Command AddIndexCommand(CLI::App* app) {
  CLI::App* sub =
      app->add_subcommand("index",
                          "Build the approximate nearest-neighbour index (HNSW, hnswlib) of an embeddings file, for\n"
                          "`search --ann`: <embeddings>.hnsw and its record <embeddings>.hnsw.json. A search then\n"
                          "visits a few thousand vectors per query instead of all; bench/NOTES.md measures build\n"
                          "time, recall and where it beats exact search. Rebuild after the file changes (search\n"
                          "refuses a stale index).\n"
                          "  docmatch index --embeddings runs/wiki/embeddings.h5\n"
                          "  docmatch search --embeddings runs/wiki/embeddings.h5 --ann --id Absolute_zero");
  auto embeddings = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  auto options = std::make_shared<eval::AnnBuildOptions>();
  auto no_progress = std::make_shared<bool>(false);
  auto overwrite = std::make_shared<bool>(false);
  sub->add_option("--embeddings", *embeddings, "an embeddings file (embed, encode --output, eval)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--output", *output, "index file (default: <embeddings>.hnsw)");
  sub->add_option("--m", options->m, "graph degree: more = higher recall, larger and slower to build")
      ->capture_default_str()
      ->check(CLI::Range(2, 256));
  sub->add_option("--ef-construction", options->ef_construction, "candidates kept while inserting")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("-j,--threads", options->threads, "insertion threads (0 = all cores)")
      ->capture_default_str()
      ->check(NonNegative());
  sub->add_flag("--overwrite", *overwrite, "replace an existing index");
  sub->add_flag("--no-progress", *no_progress, "no progress bar");
  return {sub, [embeddings, output, options, no_progress, overwrite] {
            const std::string path = output->empty() ? eval::AnnIndex::DefaultPath(*embeddings) : *output;
            RefuseProtectedOutput("index", path, {*embeddings});
            if (fs::exists(path) && !*overwrite) {
              throw Error("index", "'" + path + "' exists; pass --overwrite to replace it");
            }
            options->progress = !*no_progress;
            const eval::EmbeddingFile file(*embeddings);
            const auto start = std::chrono::steady_clock::now();
            eval::AnnIndex::Build(file, path, *options);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::cout << "[index] " << file.size() << " vectors -> " << path << " in " << seconds << " s" << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
