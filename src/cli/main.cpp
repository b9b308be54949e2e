// docmatch: train, evaluate and serve long-document matching encoders.
// This file wires the subcommands together; each lives in its own file.
#include <glog/logging.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/yaml_config.h"
#include "data/corpus/hdf5_util.h"
#include "dist/build_info.h"
#include "dist/runtime.h"

namespace {

// Edits (insert, delete, substitute, swap neighbours) between a and b.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The first word that is neither an option nor --config's value: the
// command the user meant to run, or empty.
std::string CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--config") {
      ++i;
    } else if (word.empty() || word[0] != '-') {
      return word;
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    docmatch::dist::ConfigureHostAllocator();
  } catch (const std::exception& e) {
    std::cerr << "docmatch: error: " << e.what() << std::endl;
    return 2;
  }
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  CLI::App app{
      "docmatch: distributed training of encoders that match long documents\n"
      "(SMITH, DocSplit, SMASH RNN / HAN, SDR, MatchBERT).\n\n"
      "A run goes: prepare a corpus into shards, then pretrain, finetune, embed\n"
      "and eval; search finds the documents nearest a document or a text, and\n"
      "encode turns raw text into vectors. Every command reads an optional YAML\n"
      "config (--config) whose section for the command holds its long options;\n"
      "flags override it, and --dump-config prints the result.\n\n"
      "  docmatch prepare --input articles.jsonl --output corpora/wiki\n"
      "  docmatch inspect corpora/wiki --doc Absolute_zero\n"
      "  docmatch prepare --config configs/prepare-wikispeedia.yaml --dump-config\n"
      "  docmatch search --embeddings runs/wiki/embeddings.h5 --text 'ice ages and glaciers'\n",
      "docmatch"};
  app.config_formatter(std::make_shared<docmatch::cli::YamlConfig>());
  app.set_config("--config", "", "YAML config with a section per command (see configs/)");
  bool dump_config = false, verbose = false;
  app.add_flag("--dump-config", dump_config, "print the resolved config of the command and exit");
  app.add_flag("--verbose", verbose, "also print HDF5's own error stack when reading or writing a file fails");
  app.require_subcommand(1);
  app.set_version_flag("--version", docmatch::dist::CurrentBuildInfo().docmatch_version);

  const std::vector<docmatch::cli::Command> commands = {
      docmatch::cli::AddPrepareCommand(&app),  docmatch::cli::AddInspectCommand(&app),
      docmatch::cli::AddInfoCommand(&app),     docmatch::cli::AddPretrainCommand(&app),
      docmatch::cli::AddFinetuneCommand(&app), docmatch::cli::AddEmbedCommand(&app),
      docmatch::cli::AddEvalCommand(&app),     docmatch::cli::AddExportCommand(&app),
      docmatch::cli::AddImportCommand(&app),   docmatch::cli::AddTokenizeCommand(&app),
      docmatch::cli::AddEncodeCommand(&app),   docmatch::cli::AddSearchCommand(&app),
  };
  for (const auto& command : commands) {
    command.app->fallthrough();
    // The parent's options work after the command too; say so where users look.
    const std::string& name = command.app->get_name();
    command.app->footer("\nAlso: --config FILE reads these long options from the `" + name +
                        ":` section of a YAML file (flags given here override it; configs/ has examples);\n"
                        "--dump-config prints the resolved options and exits; --verbose shows HDF5's own error stack.\n"
                        "  docmatch " +
                        name + " --config FILE --dump-config\n");
  }

  // An unknown command word: name it and the nearest command, instead of
  // CLI11's "A subcommand is required".
  const std::string word = CommandWord(argc, argv);
  const bool known = std::any_of(commands.begin(), commands.end(), [&](const docmatch::cli::Command& command) {
    return command.app->get_name() == word;
  });
  if (!word.empty() && !known) {
    std::string nearest, names;
    size_t best = word.size();
    for (const auto& command : commands) {
      const std::string& name = command.app->get_name();
      names += (names.empty() ? "" : ", ") + name;
      const size_t distance = EditDistance(word, name);
      if (distance < best) best = distance, nearest = name;
    }
    std::cerr << "docmatch: error: unknown command '" << word << "'";
    if (!nearest.empty() && best <= 2) std::cerr << "; did you mean '" << nearest << "'?";
    std::cerr << "\ncommands: " << names << " (docmatch --help tells what each does)" << std::endl;
    return 2;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  docmatch::data::hdf5::ShowErrorStacks(verbose);
  if (dump_config) {
    std::cout << app.config_to_str(/*default_also=*/true, /*write_description=*/false);
    return 0;
  }
  for (const auto& command : commands) {
    if (!command.app->parsed()) continue;
    try {
      return command.run();
    } catch (const std::exception& e) {
      std::cerr << "docmatch " << command.app->get_name() << ": error: " << e.what() << std::endl;
      return 1;
    }
  }
  return 1;
}
