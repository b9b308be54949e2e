// `docmatch inspect`: what a corpus or a shard holds, and one document decoded
// back into its paragraphs and sentences; model and run folders go to
// inspect_runs.h.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/inspect_runs.h"
#include "cli/training_flags.h"
#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/corpus/corpus.h"
#include "data/text/tokenizer.h"

namespace docmatch::cli {
namespace fs = std::filesystem;
namespace {

struct InspectOptions {
  std::string path;    // corpus folder or shard file
  std::string doc_id;  // decode this document
  int64_t index = -1;  // or the document at this index
  bool json = false;
  bool verify = false;  // read every document: checksums, offsets, token ranges
};

nlohmann::json Distribution(std::vector<int64_t> values) {
  if (values.empty()) return nlohmann::json::object();
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (int64_t v : values) sum += static_cast<double>(v);
  auto quantile = [&](double q) { return values[static_cast<size_t>(q * (values.size() - 1))]; };
  return {{"mean", sum / values.size()},
          {"min", values.front()},
          {"p50", quantile(0.5)},
          {"p95", quantile(0.95)},
          {"max", values.back()}};
}

nlohmann::json LengthSummary(const std::vector<data::DocumentLength>& lengths) {
  std::vector<int64_t> tokens, sentences, paragraphs;
  for (const auto& l : lengths) {
    tokens.push_back(l.tokens);
    sentences.push_back(l.sentences);
    paragraphs.push_back(l.paragraphs);
  }
  return {{"tokens_per_document", Distribution(tokens)},
          {"sentences_per_document", Distribution(sentences)},
          {"paragraphs_per_document", Distribution(paragraphs)}};
}

void PrintDocument(const data::Document& d, const data::Tokenizer& tokenizer, bool json) {
  nlohmann::json paragraphs = nlohmann::json::array();
  for (int64_t p = 0; p < d.num_paragraphs(); ++p) {
    nlohmann::json sentences = nlohmann::json::array();
    for (int64_t s = d.paragraph_offsets[p]; s < d.paragraph_offsets[p + 1]; ++s) {
      sentences.push_back(tokenizer.Decode(d.Sentence(s)));
    }
    paragraphs.push_back(sentences);
  }
  if (json) {
    std::cout << nlohmann::json{{"index", d.index},
                                {"id", d.id},
                                {"title", d.title},
                                {"tokens", d.num_tokens()},
                                {"sentences", d.num_sentences()},
                                {"paragraphs", paragraphs}}
                     .dump(2)
              << std::endl;
    return;
  }
  std::cout << "document " << d.index << "  id \"" << d.id << "\""
            << (d.title.empty() ? "" : "  title \"" + d.title + "\"") << "\n  " << d.num_paragraphs() << " paragraphs, "
            << d.num_sentences() << " sentences, " << d.num_tokens() << " tokens\n";
  int64_t s = 0;
  for (size_t p = 0; p < paragraphs.size(); ++p) {
    std::cout << "\n  ¶" << p + 1 << "\n";
    for (const auto& sentence : paragraphs[p]) {
      std::cout << "    [" << s << "] " << sentence.get<std::string>() << "\n";
      ++s;
    }
  }
}

// Reads every document of `shards`: HDF5 checks each chunk's checksum, the
// reader checks offsets and token ids, and the first fault is thrown naming
// its shard and document. Prints what was read.
int Verify(const std::vector<const data::ShardReader*>& shards) {
  int64_t total = 0;
  for (const data::ShardReader* shard : shards) total += shard->num_documents();
  console::ProgressBar bar("[data] verify", total, "docs", "tokens", true);
  constexpr int64_t kBlock = 256;
  int64_t tokens = 0;
  for (const data::ShardReader* shard : shards) {
    shard->ReadLengths();
    for (int64_t begin = 0; begin < shard->num_documents(); begin += kBlock) {
      const int64_t end = std::min(begin + kBlock, shard->num_documents());
      int64_t block_tokens = 0;
      for (const data::Document& d : shard->Read(begin, end)) block_tokens += d.num_tokens();
      tokens += block_tokens;
      bar.Add(end - begin, block_tokens);
      console::StopIfInterrupted();
    }
  }
  bar.Finish();
  std::cout
      << nlohmann::json{{"verified_shards", shards.size()}, {"verified_documents", total}, {"tokens", tokens}}.dump(2)
      << std::endl;
  return 0;
}

int Run(const InspectOptions& o) {
  const bool is_shard = fs::is_regular_file(o.path);
  const bool decode = !o.doc_id.empty() || o.index >= 0;
  if (is_shard) {
    const data::ShardReader shard(o.path);
    const data::ShardHeader& h = shard.header();
    if (o.verify) return Verify({&shard});
    if (decode) {
      // The corpus's tokenizer, whichever kind (a lone shard: tokenizer.model or .wordpiece beside it).
      const fs::path folder = fs::path(o.path).parent_path();
      const fs::path model = fs::exists(folder / data::kManifestFile)
                                 ? fs::path(data::Corpus(folder.string()).tokenizer_path())
                             : fs::exists(folder / data::kWordPieceFile) ? folder / data::kWordPieceFile
                                                                         : folder / data::kTokenizerFile;
      const data::Tokenizer tokenizer = data::Tokenizer::Load(model.string());
      int64_t local = o.index;
      if (!o.doc_id.empty()) {
        const auto ids = shard.ReadIds();
        const auto it = std::find(ids.begin(), ids.end(), o.doc_id);
        if (it == ids.end()) throw std::runtime_error("no document \"" + o.doc_id + "\" in shard " + o.path);
        local = it - ids.begin();
      }
      if (local >= shard.num_documents()) {
        throw std::out_of_range("index " + std::to_string(local) + " outside the shard's " +
                                std::to_string(shard.num_documents()) + " documents");
      }
      PrintDocument(shard.Read(local, local + 1).front(), tokenizer, o.json);
      return 0;
    }
    nlohmann::json summary = {{"shard", o.path},
                              {"format_version", h.format_version},
                              {"tokenizer_hash", h.tokenizer_hash},
                              {"vocab_size", h.vocab_size},
                              {"documents", h.counts.documents},
                              {"paragraphs", h.counts.paragraphs},
                              {"sentences", h.counts.sentences},
                              {"tokens", h.counts.tokens},
                              {"bytes", fs::file_size(o.path)},
                              {"lengths", LengthSummary(shard.ReadLengths())}};
    std::cout << summary.dump(2) << std::endl;
    return 0;
  }

  const bool model = IsModelFolder(o.path), run = IsRunFolder(o.path);
  if (model || run) {
    if (decode || o.verify) {
      throw Error("inspect", "--doc, --index and --verify read a corpus; '" + o.path + "' is a " +
                                 (model ? "model" : "run") + " folder");
    }
    std::cout << (model ? DescribeModelFolder(o.path) : DescribeRun(o.path)).dump(2) << std::endl;
    return 0;
  }
  if (!fs::exists(fs::path(o.path) / data::kManifestFile)) {
    throw Error("inspect", "'" + o.path +
                               "' is neither a prepared corpus (no manifest.json), a shard, a model folder (no "
                               "config.json) nor a training run (no config.yaml, metrics.jsonl or latest)");
  }
  const data::Corpus corpus(o.path);
  if (o.verify) {
    std::vector<const data::ShardReader*> shards;
    for (int s = 0; s < corpus.num_shards(); ++s) shards.push_back(&corpus.shard(s));
    return Verify(shards);
  }
  if (decode) {
    const data::Tokenizer tokenizer = data::Tokenizer::Load(corpus.tokenizer_path());
    int64_t index = o.index;
    if (!o.doc_id.empty()) {
      const auto found = corpus.IndexOf(o.doc_id);
      if (!found) throw std::runtime_error("no document with id \"" + o.doc_id + "\" in corpus " + o.path);
      index = *found;
    }
    PrintDocument(corpus.Get(index), tokenizer, o.json);
    return 0;
  }
  std::vector<data::DocumentLength> lengths;
  int64_t bytes = 0;
  for (int s = 0; s < corpus.num_shards(); ++s) {
    const auto shard_lengths = corpus.shard(s).ReadLengths();
    lengths.insert(lengths.end(), shard_lengths.begin(), shard_lengths.end());
    bytes += static_cast<int64_t>(fs::file_size(corpus.shard(s).path()));
  }
  const data::Manifest& m = corpus.manifest();
  nlohmann::json summary = {
      {"corpus", o.path},
      {"shards", corpus.num_shards()},
      {"shard_bytes", bytes},
      {"tokenizer", {{"file", m.tokenizer_file}, {"hash", m.tokenizer_hash}, {"vocab_size", m.vocab_size}}},
      {"documents", m.totals.documents},
      {"paragraphs", m.totals.paragraphs},
      {"sentences", m.totals.sentences},
      {"tokens", m.totals.tokens},
      {"lengths", LengthSummary(lengths)},
      {"skipped_or_changed", m.report.value("skipped_or_changed", nlohmann::json::object())}};
  std::cout << summary.dump(2) << std::endl;
  return 0;
}

}  // namespace

Command AddInspectCommand(CLI::App* app) {
  CLI::App* sub =
      app->add_subcommand("inspect",
                          "Summarise what a path holds, as JSON:\n"
                          "  a prepared corpus (folder) or one shard (.h5 file): counts, length distributions,\n"
                          "    tokenizer, what prepare skipped; with --doc or --index, one document decoded back into\n"
                          "    its paragraphs and sentences;\n"
                          "  a model folder (a checkpoint step-<N>, <run>/best, an import or an export): kind, size,\n"
                          "    tokenizer, the step and best validation loss, and the command that made it;\n"
                          "  a training run (--run's folder): its checkpoints, best validation, first and last loss\n"
                          "    and throughput (scripts/plot-run.py draws the curves).\n"
                          "  docmatch inspect corpora/manpages --doc printf.3\n"
                          "  docmatch inspect checkpoints/quickstart/minilm-contrastive");
  auto o = std::make_shared<InspectOptions>();
  sub->add_option("path", o->path, "corpus folder, shard file, model folder or run folder")
      ->required()
      ->check(CLI::ExistingPath);
  sub->add_option("--doc", o->doc_id, "decode the document with this id");
  sub->add_option("--index", o->index, "decode the document at this index")->check(NonNegative());
  sub->add_flag("--json", o->json, "print the decoded document as JSON");
  sub->add_flag("--verify", o->verify,
                "read every document: each chunk's checksum, the offsets and every token id are checked, and\n"
                "the first damaged shard and document are named (exit 1)");
  return {sub, [o] { return Run(*o); }};
}

}  // namespace docmatch::cli
