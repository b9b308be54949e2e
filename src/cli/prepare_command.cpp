// `docmatch prepare`: raw documents into tokenized HDF5 shards (data/text/prepare.h).
#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "data/text/input_shapes.h"
#include "data/text/prepare.h"
#include "files/file_writer.h"
#include "io/model_folder.h"

namespace docmatch::cli {
namespace fs = std::filesystem;
namespace {

data::PrepareReport PrepareAndReport(const data::PrepareOptions& options, const std::string& report_json) {
  const data::PrepareReport report = data::Prepare(options);
  std::cout << "[data] prepared " << options.output << "\n" << report.ToText();
  if (!report_json.empty()) files::ReplaceFile(report_json, report.ToJson().dump(2) + "\n");
  return report;
}

// A staging folder, removed however the scope ends.
struct RemovedOnExit {
  std::string path;
  ~RemovedOnExit() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// `output` without a trailing separator, so that a sibling's name can be made from it.
std::string WithoutTrailingSlash(std::string output) {
  while (output.size() > 1 && output.back() == '/') output.pop_back();
  return output;
}

// A BEIR folder's training split (qrels/train.tsv, and dev.tsv unless eval
// uses it) as fine-tuning pairs in a corpus of their own, <output>-train:
// the judged queries and documents, with the corpus's tokenizer. Returns the
// finetune command, or "" when the folder has no training split.
std::string PrepareBeirTraining(const data::PrepareOptions& corpus, const std::string& evaluated) {
  const fs::path qrels = fs::path(corpus.input).parent_path() / "qrels";
  if (!fs::is_regular_file(qrels / "train.tsv")) return "";
  const std::string output = corpus.output + "-train", staged = corpus.output + "-train.beir-import";
  RefuseProtectedOutput("prepare", output, {corpus.input, corpus.tokenizer_model});
  std::vector<data::QrelsSplit> splits = {{(qrels / "train.tsv").string(), staged + "/pairs.train.jsonl"}};
  if (fs::is_regular_file(qrels / "dev.tsv") && fs::path(evaluated).filename() != "dev.tsv") {
    splits.push_back({(qrels / "dev.tsv").string(), staged + "/pairs.valid.jsonl", /*validation=*/true});
  }
  fs::remove_all(staged);
  fs::create_directories(staged);
  const RemovedOnExit cleanup{staged};
  const data::BeirTrainingImport imported =
      data::ImportBeirTraining(fs::path(corpus.input).parent_path().string(), splits, staged + "/texts.jsonl");
  if (imported.queries == 0) {
    LOG(WARNING) << "[data] " << qrels.string() << "/train.tsv judges no query: no training corpus";
    return "";
  }
  data::PrepareOptions training = corpus;
  training.input = staged + "/texts.jsonl";
  training.output = output;
  training.title_in_text = true;
  training.tokenizer_model = io::TokenizerFileOf(corpus.output);
  std::cout << "[data] training pairs: " << imported.queries << " queries and " << imported.documents
            << " documents they judge into " << output << " (query ids as query:<id>)" << std::endl;
  PrepareAndReport(training, "");
  // A text prepare skipped (empty, or tokenized to nothing) leaves its pairs out.
  const data::Corpus prepared(output);
  std::string command = "docmatch finetune --init MODEL --corpus " + output;
  bool negatives = false;
  for (const data::QrelsSplit& split : imported.splits) {
    const std::string kept = output + "/" + fs::path(split.pairs).filename().string();
    const data::PairsKept counts = data::KeepPairsOfCorpus(split.pairs, prepared, kept);
    std::cout << "[data] " << split.qrels << ": " << counts.positives << " relevant and " << counts.negatives
              << " unrelated pairs -> " << kept << "\n";
    if (counts.left_out > 0) {
      LOG(WARNING) << "[data] " << counts.left_out << " pairs of " << split.qrels
                   << " name a text prepare skipped (" << output << "/" << data::kSkippedFile << ") and are left out";
    }
    if (counts.positives == 0) {
      if (!split.validation) throw data::InputError(split.qrels + " leaves no related pair to train on");
      continue;
    }
    command += (split.validation ? " --valid-pairs " : " --train-pairs ") + kept;
    negatives = negatives || (!split.validation && counts.negatives > 0);
  }
  return command + " --loss contrastive" + (negatives ? " --hard-negatives 1" : "") + " --run runs/beir";
}

// A BEIR folder: the corpus (titles in the text) into --output, the queries
// with the same tokenizer into <output>-queries; the qrels stay where they
// are; a training split becomes pairs in <output>-train.

int PrepareBeir(data::PrepareOptions options, const std::string& report_json) {
  const fs::path folder(options.input);
  options.output = WithoutTrailingSlash(options.output);
  const bool has_queries = fs::is_regular_file(folder / "queries.jsonl");
  const std::string queries_output = options.output + "-queries";
  RefuseProtectedOutput("prepare", queries_output, {options.input, options.tokenizer_model});
  options.input = (folder / "corpus.jsonl").string();
  options.title_in_text = true;
  std::cout << "[data] " << folder.string() << " is a BEIR dataset: its corpus into " << options.output
            << (has_queries ? ", its queries into " + queries_output : std::string(", and it has no queries.jsonl"))
            << std::endl;
  PrepareAndReport(options, report_json);
  if (!has_queries) return 0;
  data::PrepareOptions queries = options;
  queries.input = (folder / "queries.jsonl").string();
  queries.output = queries_output;
  queries.title_in_text = false;
  queries.tokenizer_model = io::TokenizerFileOf(options.output);  // the corpus's, trained or given
  PrepareAndReport(queries, "");
  std::vector<std::string> qrels;
  if (fs::is_directory(folder / "qrels")) {
    for (const auto& entry : fs::directory_iterator(folder / "qrels"))
      if (entry.path().extension() == ".tsv") qrels.push_back(entry.path().string());
  }
  std::sort(qrels.begin(), qrels.end());
  for (const std::string& file : qrels) std::cout << "[data] relevance judgements: " << file << "\n";
  // The split to evaluate on: test, else dev, else any but train.
  std::string evaluated = "QRELS.tsv";
  for (const char* split : {"test.tsv", "dev.tsv"}) {
    if (evaluated == "QRELS.tsv" && fs::is_regular_file(folder / "qrels" / split))
      evaluated = (folder / "qrels" / split).string();
  }
  for (const std::string& file : qrels) {
    if (evaluated == "QRELS.tsv" && fs::path(file).filename() != "train.tsv") evaluated = file;
  }
  const std::string train_command = PrepareBeirTraining(options, evaluated);
  if (!train_command.empty()) std::cout << "[data] next: " << train_command << "\n";
  std::cout << "[data] " << (train_command.empty() ? "next" : "then") << ": docmatch eval --model "
            << (train_command.empty() ? "MODEL" : "runs/beir/latest") << " --corpus " << options.output << " --queries "
            << queries_output << " --relevance " << evaluated << " --output runs/eval" << std::endl;
  return 0;
}

// Text pairs: every distinct text a document, the pairs in <output>/pairs.jsonl.
int PrepareTextPairs(data::PrepareOptions options, const std::string& report_json) {
  options.output = WithoutTrailingSlash(options.output);
  const std::string staged = options.output + ".pairs-import";
  fs::remove_all(staged);
  fs::create_directories(staged);
  const RemovedOnExit cleanup{staged};
  const std::string texts = staged + "/texts.jsonl", pairs = staged + "/pairs.jsonl";
  const data::TextPairsImport imported = data::ImportTextPairs(options.input, texts, pairs);
  std::cout << "[data] " << options.input << " holds text pairs: " << imported.lines << " lines, " << imported.positives
            << " related and " << imported.negatives << " unrelated pairs over " << imported.texts << " distinct texts"
            << std::endl;
  options.input = texts;
  PrepareAndReport(options, report_json);
  const std::string pair_file = options.output + "/pairs.jsonl";
  fs::rename(pairs, pair_file);
  std::cout << "[data] pairs: " << pair_file << " (source and target are the texts' ids, t1, t2, ...)\n"
            << "[data] next: docmatch finetune --init MODEL --corpus " << options.output << " --train-pairs "
            << pair_file << " --loss contrastive" << (imported.negatives > 0 ? " --hard-negatives 1" : "")
            << " --run runs/pairs" << std::endl;
  return 0;
}

}  // namespace

Command AddPrepareCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "prepare",
      "Turn raw documents into a tokenized, sharded corpus.\n"
      "Input: a JSONL file ({\"id\", \"text\", optional \"title\"} a line) or a folder of\n"
      ".txt files (file name = id); blank lines separate paragraphs. Sentences come\n"
      "from ICU, tokens from SentencePiece (trained on the corpus unless --tokenizer\n"
      "names one). Output: shard-NNNNN.h5 files, the tokenizer (tokenizer.model, or\n"
      "tokenizer.wordpiece for a WordPiece vocabulary) and manifest.json in --output,\n"
      "and a report of what was skipped and why.\n"
      "Also as they come: a BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/)\n"
      "prepares the corpus (titles as first paragraphs) into --output and the queries\n"
      "into <output>-queries, for eval --queries with the qrels, and qrels/train.tsv\n"
      "(dev.tsv for validation) as finetune pairs in <output>-train; sentence-transformers\n"
      "pairs ({\"anchor\", \"positive\", optional \"negative\"} lines) prepare each distinct\n"
      "text as a document and write <output>/pairs.jsonl for finetune --train-pairs.\n"
      "  docmatch prepare --input articles.jsonl --output corpora/wiki\n"
      "  docmatch prepare --input mine.jsonl --output corpora/mine --tokenizer models/minilm\n"
      "  docmatch prepare --input beir/scifact --output corpora/scifact --tokenizer models/minilm\n"
      "  docmatch prepare --input train-pairs.jsonl --output corpora/pairs --tokenizer models/minilm");
  auto options = std::make_shared<data::PrepareOptions>();
  auto report_json = std::make_shared<std::string>();
  auto no_progress = std::make_shared<bool>(false);
  auto invalid_utf8 = std::make_shared<std::string>("repair");
  sub->add_option("-i,--input", options->input,
                  "JSONL file or folder of .txt files; or a BEIR dataset folder, or a JSONL of text pairs")
      ->required();
  sub->add_flag("--title-in-text", options->title_in_text,
                "a document's \"title\" also opens its text, as its first paragraph (on for a BEIR folder)");
  sub->add_option("-o,--output", options->output, "corpus folder to write")->required();
  sub->add_option("--tokenizer", options->tokenizer_model,
                  "tokenizer to use: a model folder that carries one (import-hf output, an export), a corpus "
                  "folder, or a tokenizer file (SentencePiece with ids 0-4 [PAD] <unk> [CLS] [SEP] [MASK], or "
                  "docmatch's tokenizer.wordpiece); default: train a SentencePiece model on the corpus")
      ->check(CLI::ExistingPath);
  sub->add_option("--vocab-size", options->tokenizer.vocab_size, "pieces in a trained tokenizer")
      ->capture_default_str()
      ->check(CLI::Range(64, 1 << 20));
  sub->add_option("--tokenizer-type", options->tokenizer.model_type, "unigram or bpe")
      ->capture_default_str()
      ->check(CLI::IsMember({"unigram", "bpe"}));
  sub->add_option("--tokenizer-sentences", options->tokenizer.max_sentences,
                  "at most this many sentences (sampled) train the tokenizer")
      ->capture_default_str();
  sub->add_option("--documents-per-shard", options->documents_per_shard, "documents in each shard file")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--max-document-tokens", options->max_document_tokens,
                  "longer documents are truncated (and counted in the report)")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--invalid-utf8", *invalid_utf8,
                  "repair: replace bad bytes by U+FFFD and keep the document; skip: drop it")
      ->capture_default_str()
      ->check(CLI::IsMember({"repair", "skip"}));
  sub->add_option("--locale", options->locale, "ICU locale for sentence rules")->capture_default_str();
  sub->add_option("-j,--threads", options->threads, "worker threads (0 = all cores)")->capture_default_str();
  sub->add_flag("--overwrite", options->overwrite, "replace a corpus already in --output");
  sub->add_flag("--no-progress", *no_progress, "no progress bars");
  sub->add_option("--report-json", *report_json, "also write the report as JSON to this file");

  return {sub, [options, report_json, no_progress, invalid_utf8] {
            options->progress = !*no_progress;
            RefuseProtectedOutput("prepare", options->output, {options->input, options->tokenizer_model});
            if (!options->tokenizer_model.empty())
              options->tokenizer_model = io::TokenizerFileOf(options->tokenizer_model);
            options->invalid_utf8 =
                *invalid_utf8 == "skip" ? data::InvalidUtf8Policy::kSkip : data::InvalidUtf8Policy::kRepair;
            const data::InputShape shape = data::DetectInputShape(options->input);
            if (shape == data::InputShape::kBeir) return PrepareBeir(*options, *report_json);
            if (shape == data::InputShape::kTextPairs) return PrepareTextPairs(*options, *report_json);
            PrepareAndReport(*options, *report_json);
            return 0;
          }};
}

}  // namespace docmatch::cli
