// `docmatch prepare`: raw documents into tokenized HDF5 shards (data/text/prepare.h).
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "data/text/prepare.h"
#include "files/file_writer.h"
#include "io/model_folder.h"

namespace docmatch::cli {

Command AddPrepareCommand(CLI::App* app) {
  CLI::App* sub =
      app->add_subcommand("prepare",
                          "Turn raw documents into a tokenized, sharded corpus.\n"
                          "Input: a JSONL file ({\"id\", \"text\", optional \"title\"} a line) or a folder of\n"
                          ".txt files (file name = id); blank lines separate paragraphs. Sentences come\n"
                          "from ICU, tokens from SentencePiece (trained on the corpus unless --tokenizer\n"
                          "names one). Output: shard-NNNNN.h5 files, the tokenizer (tokenizer.model, or\n"
                          "tokenizer.wordpiece for a WordPiece vocabulary) and manifest.json in --output,\n"
                          "and a report of what was skipped and why.\n"
                          "  docmatch prepare --input articles.jsonl --output corpora/wiki\n"
                          "  docmatch prepare --input mine.jsonl --output corpora/mine --tokenizer models/minilm");
  auto options = std::make_shared<data::PrepareOptions>();
  auto report_json = std::make_shared<std::string>();
  auto no_progress = std::make_shared<bool>(false);
  auto invalid_utf8 = std::make_shared<std::string>("repair");
  sub->add_option("-i,--input", options->input, "JSONL file or folder of .txt files")->required();
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
            const data::PrepareReport report = data::Prepare(*options);
            std::cout << "[data] prepared " << options->output << "\n" << report.ToText();
            if (!report_json->empty()) files::ReplaceFile(*report_json, report.ToJson().dump(2) + "\n");
            return 0;
          }};
}

}  // namespace docmatch::cli
