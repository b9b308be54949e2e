// `docmatch export`: a self-contained model folder (io/export.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "io/export.h"

namespace docmatch::cli {

Command AddExportCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "export",
      "Export a model folder (a checkpoint, <run>/best or an import) for serving and for other\n"
      "tools. A transformer encoder with a WordPiece vocabulary (what import-hf brings in, and\n"
      "what is trained from it) is written as a Hugging Face BERT model that is also a\n"
      "sentence-transformers model: SentenceTransformer(folder), AutoModel and AutoTokenizer load\n"
      "it and give docmatch's vectors. MatchBERT: its document vector (one window); SDR: its\n"
      "sentence vector (a text read as one sentence). SMITH, with --format hf only: its sentence\n"
      "encoder, a text read as one block giving its block vector (the document level stays\n"
      "behind; docmatch does not read that folder back). Other models, and SMITH by default, are\n"
      "written in docmatch's layout (model.safetensors + config.json + tokenizer), for `embed\n"
      "--model`, the safetensors package or scripts/reference_vector.py (numpy).\n"
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
                  "auto (hf for MatchBERT and SDR where their vocabulary allows it, else docmatch), hf (Hugging "
                  "Face BERT + sentence-transformers; WordPiece transformer encoders, SMITH's sentence encoder) "
                  "or docmatch (any model, whole)")
      ->check(CLI::IsMember({"auto", "hf", "docmatch"}))
      ->capture_default_str();
  sub->add_flag("--overwrite", o->overwrite, "replace an existing --output");
  return {sub, [o] {
            RefuseProtectedOutput("export", o->output, {o->model, o->corpus});
            const std::string format = io::ExportModel(*o);
            std::cout << "[export] " << o->output << " (" << format << " layout)" << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
