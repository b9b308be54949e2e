// `docmatch export`: a self-contained model folder (io/export.h).
#include <iostream>

#include "cli/commands.h"
#include "io/export.h"

namespace docmatch::cli {

Command AddExportCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "export",
      "Export a model folder (a checkpoint or <run>/best) as model.safetensors +\n"
      "config.json + tokenizer.model, for `embed --model`, the safetensors package or\n"
      "scripts/reference_vector.py (numpy).\n"
      "  docmatch export --model checkpoints/smith-finetune/best --corpus corpora/manpages --output models/smith");
  auto model = std::make_shared<std::string>();
  auto corpus = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  sub->add_option("--model", *model, "model folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--corpus", *corpus, "the corpus the model was trained on (its tokenizer is copied)")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--output", *output, "folder to write")->required();
  return {sub, [model, corpus, output] {
            io::ExportModel(*model, *corpus, *output);
            std::cout << "[export] " << *output << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
