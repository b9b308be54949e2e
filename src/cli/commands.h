// The docmatch subcommands: each file registers its options on the shared
// CLI11 app and returns how to run it once the command line is parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace docmatch::cli {

struct Command {
  CLI::App* app;             // the subcommand's parser
  std::function<int()> run;  // runs it; returns the exit code
};

Command AddPrepareCommand(CLI::App* app);
Command AddInspectCommand(CLI::App* app);
Command AddInfoCommand(CLI::App* app);
Command AddPretrainCommand(CLI::App* app);
Command AddFinetuneCommand(CLI::App* app);
Command AddEmbedCommand(CLI::App* app);
Command AddFuseCommand(CLI::App* app);
Command AddEvalCommand(CLI::App* app);
Command AddExportCommand(CLI::App* app);
Command AddImportCommand(CLI::App* app);
Command AddTokenizeCommand(CLI::App* app);
Command AddSearchCommand(CLI::App* app);
Command AddIndexCommand(CLI::App* app);
Command AddEncodeCommand(CLI::App* app);
Command AddChooseCommand(CLI::App* app);

}  // namespace docmatch::cli
