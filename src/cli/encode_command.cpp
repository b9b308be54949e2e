// `docmatch encode`: raw text in, vectors out, without preparing a corpus:
// each document is segmented and tokenized exactly as `prepare` does it
// (data/text/prepare.h TextEncoder), then embedded like `embed` embeds.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/text/corpus_reader.h"
#include "data/text/prepare.h"
#include "dist/runtime.h"
#include "eval/embeddings.h"
#include "io/model_folder.h"

namespace docmatch::cli {
namespace {
namespace fs = std::filesystem;

struct EncodeFlags {
  std::string model, input = "-", output, tokenizer, locale = "en", device = "auto";
  int64_t batch_size = 16;
  int64_t max_document_tokens = 65536;
  bool overwrite = false;
};

int RunEncode(const EncodeFlags& flags) {
  if (!flags.output.empty()) RefuseProtectedOutput("encode", flags.output, {flags.model, flags.input, flags.tokenizer});
  if (!flags.output.empty() && fs::exists(flags.output) && !flags.overwrite) {
    throw Error("encode", "'" + flags.output + "' exists; pass --overwrite to replace it");
  }
  const torch::Device device = dist::ProcessDevice(flags.device);
  io::ModelFolderInfo info;
  std::unique_ptr<model::DocumentModel> model = io::LoadModelFolder(flags.model, &info);
  model->module().to(device);
  model->module().eval();
  const data::Tokenizer tokenizer = io::LoadModelTokenizer(flags.model, info, flags.tokenizer);
  const data::TextEncoder encoder(tokenizer, flags.locale, flags.max_document_tokens);
  data::RawDocumentReader reader(flags.input == "-" ? "/dev/stdin" : flags.input);

  // HDF5 goes to a temporary name, renamed when complete, like `embed`.
  const std::string tmp = flags.output + ".tmp";
  std::unique_ptr<eval::EmbeddingWriter> writer;
  if (!flags.output.empty()) {
    if (!fs::path(flags.output).parent_path().empty()) fs::create_directories(fs::path(flags.output).parent_path());
    writer = std::make_unique<eval::EmbeddingWriter>(tmp, model->dimension(), model->has_sentences());
  }
  int64_t written = 0, empty = 0, truncated = 0;
  std::vector<data::Document> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    std::vector<const data::Document*> pointers;
    for (const auto& d : batch) pointers.push_back(&d);
    if (writer) {
      writer->Append(*model, pointers, device);
    } else {
      const torch::Tensor vectors = eval::DocumentVectors(*model, pointers, device);  // (B, D), contiguous
      const int64_t D = vectors.size(1);
      for (size_t i = 0; i < batch.size(); ++i) {
        const float* v = vectors.data_ptr<float>() + static_cast<int64_t>(i) * D;
        nlohmann::json line = {{"id", batch[i].id}, {"vector", std::vector<float>(v, v + D)}};
        std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      }
      std::cout << std::flush;
    }
    written += static_cast<int64_t>(batch.size());
    batch.clear();
  };
  console::ProgressBar bar("[encode]", -1, "docs", "", !flags.output.empty());
  data::RawDocument raw;
  while (reader.Next(&raw)) {
    const std::string origin = raw.origin;
    bool cut = false;
    data::Document document = encoder.Encode(std::move(raw), &cut);
    if (document.num_tokens() == 0) {
      LOG(WARNING) << "[encode] " << origin << ": document \"" << document.id << "\" has no text; no vector written";
      ++empty;
      continue;
    }
    truncated += cut ? 1 : 0;
    batch.push_back(std::move(document));
    if (static_cast<int64_t>(batch.size()) == flags.batch_size) {
      flush();
      bar.Add(flags.batch_size);
      console::StopIfInterrupted();
    }
  }
  const int64_t last = static_cast<int64_t>(batch.size());
  flush();
  bar.Add(last);
  bar.Finish();
  if (written == 0) {
    // Nothing to show for the run: an empty file or the wrong one, not success.
    writer.reset();  // removes the unfinished file
    throw Error("encode", "no document with text in " +
                              (flags.input == "-" ? std::string("standard input") : "'" + flags.input + "'") +
                              (empty ? " (" + std::to_string(empty) + " without text)" : "") +
                              ": nothing encoded, nothing written");
  }
  if (writer) {
    const std::string score = !model->has_sentences() ? "cosine" : info.config.kind == "sdr" ? "sdr" : "maxsim";
    writer->WriteAttributes(
        {{"kind", info.config.kind}, {"score", score}, {"model", flags.model}, {"tokenizer_hash", tokenizer.hash()}});
    writer->Close();
    fs::rename(tmp, flags.output);
  }
  std::cerr << "[encode] " << written << " documents" << (flags.output.empty() ? "" : " -> " + flags.output)
            << (empty ? ", " + std::to_string(empty) + " without text skipped" : "")
            << (truncated ? ", " + std::to_string(truncated) + " cut at --max-document-tokens" : "") << std::endl;
  return 0;
}

}  // namespace

Command AddEncodeCommand(CLI::App* app) {
  auto flags = std::make_shared<EncodeFlags>();
  CLI::App* sub = app->add_subcommand(
      "encode",
      "Turn raw text into vectors with a model folder, without preparing a corpus. Reads JSONL\n"
      "({\"id\", \"text\", optional \"title\"} a line; standard input by default) or a folder of\n"
      ".txt files; segments and tokenizes each document exactly as `prepare` does; writes JSON\n"
      "lines {\"id\", \"vector\"} to standard output, or with --output an embeddings file that\n"
      "`search` and `eval --embeddings` read.\n"
      "  echo '{\"id\": \"q1\", \"text\": \"Glaciers advanced.\"}' | docmatch encode --model models/minilm\n"
      "  docmatch encode --model checkpoints/run/best --tokenizer corpora/wiki --input new.jsonl --output new.h5");
  sub->add_option("--model", flags->model, "model folder (a checkpoint, <run>/best, an import or an export)")
      ->required()
      ->check(ModelFolder());
  sub->add_option("--input", flags->input, "JSONL file or folder of .txt files ('-' = standard input)")
      ->capture_default_str();
  sub->add_option("--output", flags->output, "embeddings file (HDF5) instead of JSON lines on standard output");
  sub->add_flag("--overwrite", flags->overwrite, "replace an existing --output");
  sub->add_option("--tokenizer", flags->tokenizer,
                  "the corpus folder the model was trained on (or its tokenizer file), when the folder carries none "
                  "(training checkpoints)");
  sub->add_option("--locale", flags->locale, "ICU locale for sentence rules, as given to `prepare`")
      ->capture_default_str();
  sub->add_option("--max-document-tokens", flags->max_document_tokens, "longer documents are cut, as in `prepare`")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--batch-size", flags->batch_size, "documents per forward pass")
      ->capture_default_str()
      ->check(Positive());
  AddDeviceFlag(sub, &flags->device);
  return {sub, [flags] {
            return WithMemoryAdvice("encode", flags->batch_size, "a smaller --batch-size",
                                    [&] { return RunEncode(*flags); });
          }};
}

}  // namespace docmatch::cli
