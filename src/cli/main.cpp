// docmatch: train, evaluate and serve long-document matching encoders.
// This file wires the subcommands together; each lives in its own file.
#include <glog/logging.h>

#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "cli/yaml_config.h"
#include "data/corpus/hdf5_util.h"
#include "dist/build_info.h"
#include "dist/runtime.h"

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
  for (const auto& command : commands) command.app->fallthrough();

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
