// `docmatch export`: a self-contained model folder (io/export.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/training_flags.h"
#include "io/export.h"

namespace docmatch::cli {

Command AddExportCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "export",
      "Export a model folder (a checkpoint, <run>/best or an import) for serving and for other\n"
      "tools. A flat encoder with a WordPiece vocabulary (MatchBERT imported with import-hf, and\n"
      "what is fine-tuned from it) is written as a Hugging Face BERT model that is also a\n"
      "sentence-transformers model: SentenceTransformer(folder), AutoModel and AutoTokenizer load\n"
      "it and give docmatch's vectors. Other models are written in docmatch's layout\n"
      "(model.safetensors + config.json + tokenizer), for `embed --model`, the safetensors package\n"
      "or scripts/reference_vector.py (numpy). Either folder is a model folder for docmatch.\n"
      "  docmatch export --model runs/minilm-contrastive/best --corpus corpora/manpages --output models/mine\n"
      "  python -c \"from sentence_transformers import SentenceTransformer as S; "
      "print(S('models/mine').encode('hi'))\"");
  auto o = std::make_shared<io::ExportOptions>();
  sub->add_option("--model", o->model, "model folder")->required()->check(ModelFolder());
  sub->add_option("--corpus", o->corpus,
                  "the corpus the model was trained on (its tokenizer is copied; imports and exports carry theirs)")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--output", o->output, "folder to write")->required();
  sub->add_option("--format", o->format,
                  "auto (hf where the model allows it, else docmatch), hf (Hugging Face BERT + "
                  "sentence-transformers; flat WordPiece encoders) or docmatch (any model)")
      ->check(CLI::IsMember({"auto", "hf", "docmatch"}))
      ->capture_default_str();
  sub->add_flag("--overwrite", o->overwrite, "replace an existing --output");
  return {sub, [o] {
            const std::string format = io::ExportModel(*o);
            std::cout << "[export] " << o->output << " (" << format << " layout)" << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
