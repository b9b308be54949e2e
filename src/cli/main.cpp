// docmatch: train, evaluate and serve long-document matching encoders.
// This file wires the subcommands together; each lives in its own file.
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/training_flags.h"
#include "cli/yaml_config.h"
#include "console/interrupt.h"
#include "console/log_sink.h"
#include "console/printable.h"
#include "data/corpus/hdf5_util.h"
#include "dist/build_info.h"
#include "dist/runtime.h"
#include "io/checksums.h"

namespace {

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

// The value of --config (`--config FILE` or `--config=FILE`), or "".
std::string ConfigPath(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--config" && i + 1 < argc) return argv[i + 1];
    if (word.rfind("--config=", 0) == 0) return word.substr(9);
  }
  return "";
}

// Checks go off for options whose values are not used: --dump-config prints a
// configuration and runs nothing, so the paths it names need not exist yet nor
// every required option be given; and a --config file's sections for the
// commands not run (eval --config before finetune's --init has been made).
// Transforms (e.g. "auto" -> -1) stay, as the values still parse.
void RelaxChecks(CLI::App* app) {
  for (CLI::Option* option : app->get_options()) {
    option->required(false);
    for (int i = 0;; ++i) {
      try {
        CLI::Validator* validator = option->get_validator(i);
        if (!validator->get_modifying()) validator->active(false);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
    }
  }
  for (CLI::App* sub : app->get_subcommands({})) RelaxChecks(sub);
}

// Exit status of a mistake on the command line (an unknown command or
// option, a missing or bad value), as the usage errors of POSIX tools; an
// error while running is 1, a stop by signal after a checkpoint 75.
constexpr int kExitUsage = 2;

// The long and short names of `app`'s options, dashes included.
std::vector<std::string> OptionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// One line for a command-line mistake: CLI11's message, and when CLI11 did
// not expect some words, for each of them that looks like an option the
// nearest option of the command (CLI11 itself only lists the words).
int UsageError(const CLI::App& app, const CLI::App* command, const CLI::ParseError& error, int argc, char** argv) {
  const std::string who = command ? "docmatch " + command->get_name() : "docmatch";
  std::vector<std::string> names = OptionNames(app);
  if (command) {
    const std::vector<std::string> own = OptionNames(*command);
    names.insert(names.end(), own.begin(), own.end());
  }
  const auto known = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  std::vector<std::string> unknown;
  const std::string listed = error.what();  // "The following arguments were not expected: 3 --topp"
  const bool extras = dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr;
  for (int i = 1; extras && i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;  // values from here on
    // An option is a dash or two and a letter: not "-" (standard input) or "-0.5".
    const size_t letter = word.rfind("--", 0) == 0 ? 2 : 1;
    if (word.size() <= letter || word[0] != '-' || !std::isalpha(static_cast<unsigned char>(word[letter]))) continue;
    if (listed.find(word) == std::string::npos) continue;  // CLI11 took it
    const std::string name = word.substr(0, word.find('='));
    if (!known(name) && !(letter == 1 && known(name.substr(0, 2)))) unknown.push_back(name);  // -j8
  }
  // What the user typed is echoed made printable (console/printable.h).
  std::cerr << who << ": error: ";
  if (unknown.empty()) {
    std::cerr << docmatch::console::Printable(error.what());
  } else {
    for (size_t i = 0; i < unknown.size(); ++i) {
      const std::string nearest = docmatch::cli::NearestName(unknown[i], names, 2);
      std::cerr << (i ? "; " : "") << "unknown option '" << docmatch::console::Printable(unknown[i]) << "'"
                << (nearest.empty() ? "" : ", did you mean '" + nearest + "'?");
    }
  }
  std::cerr << " (" << who << " --help lists the options)" << std::endl;
  return kExitUsage;
}

// The top-level --help: one line a command, not each command's whole
// description (`docmatch COMMAND --help` has that).
class CommandList : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* command) const override {
    static const std::map<std::string, std::string> kSummaries = {
        {"prepare", "raw documents (JSONL or .txt files) -> a tokenized, sharded corpus"},
        {"inspect", "what a corpus, shard, model folder or training run holds"},
        {"info", "what this build was compiled with (torch, CUDA, NCCL, MPI)"},
        {"pretrain", "pre-train on a corpus: SMITH's masked words and blocks, DocSplit, SDR"},
        {"finetune", "fine-tune on related pairs (contrastive, or labelled pairs)"},
        {"embed", "every document of a corpus -> vectors"},
        {"eval", "pair classification and ranking metrics (MRR, nDCG@10, MAP, recall@k)"},
        {"export", "a model folder for serving: docmatch, Hugging Face or sentence-transformers"},
        {"import-hf", "a Hugging Face / sentence-transformers folder -> a docmatch model"},
        {"tokenize", "standard input -> token ids, with a corpus's or a model's tokenizer"},
        {"encode", "raw text -> vectors, without a corpus"},
        {"search", "the documents nearest a document or a text"},
        {"index", "an approximate (HNSW) index for search --ann on large files"},
        {"fuse", "several models' vectors -> one file (their weighted mean cosine)"},
        {"choose", "which way of reading your corpus finds its links best: measured, with intervals"},
    };
    const auto found = kSummaries.find(command->get_name());
    const std::string& description = command->get_description();
    std::ostringstream out;
    CLI::detail::format_help(out, command->get_display_name(),
                             found != kSummaries.end() ? found->second : description.substr(0, description.find('\n')),
                             get_column_width());
    return out.str();
  }
};

}  // namespace

int main(int argc, char** argv) {
  // HDF5 would otherwise close whatever files are still open at exit; after a
  // failed write (a full disk) that close crashes inside HDF5 1.10
  // (H5F__close_cb). Every writer closes and checks its file itself
  // (hdf5::CloseFile); a file left open is a failed output, removed.
  H5dont_atexit();
  // Ctrl-C from here on stops the long commands at their next unit of work
  // (console/interrupt.h); a training run takes the request over and
  // checkpoints (train/training_run.h). The others (tokenize, fuse, export,
  // import-hf, info) keep the default: Ctrl-C ends them at once.
  const std::string word = CommandWord(argc, argv);
  for (const char* checks :
       {"prepare", "inspect", "pretrain", "finetune", "embed", "encode", "eval", "index", "search", "choose"}) {
    if (word == checks) docmatch::console::InstallInterruptHandlers();
  }
  try {
    docmatch::dist::ConfigureHostAllocator();
    docmatch::dist::QuietProfilerWithoutGpuDriver();
  } catch (const std::exception& e) {
    std::cerr << "docmatch: error: " << e.what() << std::endl;
    return 2;
  }
  // A file size limit (ulimit -f) makes write(2) fail with EFBIG, which every
  // writer reports naming its file, instead of killing the process silently.
  std::signal(SIGXFSZ, SIG_IGN);
  google::InitGoogleLogging(argv[0]);
  // Plain console lines, no log files unless a command asks (--log-dir).
  for (auto severity : {google::GLOG_INFO, google::GLOG_WARNING, google::GLOG_ERROR, google::GLOG_FATAL}) {
    google::SetLogDestination(severity, "");
  }
  docmatch::console::UsePlainConsoleLog(google::GLOG_INFO);

  CLI::App app{
      "docmatch: encoders that match long documents (SMITH, DocSplit, SMASH, SDR, MatchBERT),\n"
      "trained on one machine or many, then evaluated, searched and exported.\n\n"
      "  docmatch import-hf ~/.cache/docmatch/models/all-minilm-l6-v2 --output models/minilm\n"
      "  docmatch prepare --input mine.jsonl --output corpora/mine --tokenizer models/minilm\n"
      "  docmatch embed --model models/minilm --corpus corpora/mine --output runs/mine.h5\n"
      "  docmatch search --embeddings runs/mine.h5 --text 'what I am looking for'\n\n"
      "docmatch COMMAND --help tells all of a command.\n",
      "docmatch"};
  app.formatter(std::make_shared<CommandList>());
  app.config_formatter(std::make_shared<docmatch::cli::YamlConfig>());
  app.set_config("--config", "", "YAML config with a section per command (see configs/)");
  bool dump_config = false, verbose = false;
  app.add_flag("--dump-config", dump_config, "print the resolved config of the command and exit");
  app.add_flag("--verbose", verbose, "with an error, also HDF5's error stack and libtorch's C++ backtrace");
  bool allow_unverified = false;
  app.add_flag("--allow-unverified", allow_unverified,
               "load a model folder that has no checksums.json; its files go unchecked");
  app.require_subcommand(1);
  app.set_version_flag("--version", docmatch::dist::CurrentBuildInfo().docmatch_version);

  const std::vector<docmatch::cli::Command> commands = {
      docmatch::cli::AddPrepareCommand(&app),  docmatch::cli::AddInspectCommand(&app),
      docmatch::cli::AddInfoCommand(&app),     docmatch::cli::AddPretrainCommand(&app),
      docmatch::cli::AddFinetuneCommand(&app), docmatch::cli::AddEmbedCommand(&app),
      docmatch::cli::AddEvalCommand(&app),     docmatch::cli::AddExportCommand(&app),
      docmatch::cli::AddImportCommand(&app),   docmatch::cli::AddTokenizeCommand(&app),
      docmatch::cli::AddEncodeCommand(&app),   docmatch::cli::AddSearchCommand(&app),
      docmatch::cli::AddIndexCommand(&app),    docmatch::cli::AddFuseCommand(&app),
      docmatch::cli::AddChooseCommand(&app),
  };
  for (const auto& command : commands) {
    command.app->fallthrough();
    // The parent's options work after the command too; say so where users look.
    const std::string& name = command.app->get_name();
    command.app->footer("\nAlso: --config FILE reads these long options from the `" + name +
                        ":` section of a YAML file (flags given here override it; configs/ has examples);\n"
                        "--dump-config prints the resolved options and exits; --verbose shows HDF5's error stack and "
                        "libtorch's backtrace.\n"
                        "  docmatch " +
                        name + " --config FILE --dump-config\n");
  }

  // An unknown command word: name it and the nearest command, instead of
  // CLI11's "A subcommand is required".
  const bool known = std::any_of(commands.begin(), commands.end(), [&](const docmatch::cli::Command& command) {
    return command.app->get_name() == word;
  });
  if (!word.empty() && !known) {
    std::vector<std::string> names;
    for (const auto& command : commands) names.push_back(command.app->get_name());
    const std::string nearest = docmatch::cli::NearestName(word, names, 2);
    std::cerr << "docmatch: error: unknown command '" << docmatch::console::Printable(word) << "'";
    if (!nearest.empty()) std::cerr << "; did you mean '" << nearest << "'?";
    std::cerr << "\ncommands: ";
    for (size_t i = 0; i < names.size(); ++i) std::cerr << (i ? ", " : "") << names[i];
    std::cerr << " (docmatch --help tells what each does)" << std::endl;
    return kExitUsage;
  }

  try {
    // CLI11 ignores config keys that name nothing; a misspelt one must not
    // silently leave an option at its default. Checked first, so the key is
    // named before any complaint about the options it failed to set.
    const std::string config = ConfigPath(argc, argv);
    if (!config.empty() && std::filesystem::is_regular_file(config)) docmatch::cli::CheckConfigKeys(config, app);
    if (std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--dump-config"; })) {
      RelaxChecks(&app);
    }
    for (const auto& command : commands) {
      if (command.app->get_name() != word) RelaxChecks(command.app);
    }
    docmatch::cli::RememberCommandLine(argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    const auto command = std::find_if(commands.begin(), commands.end(),
                                      [&](const docmatch::cli::Command& c) { return c.app->get_name() == word; });
    return UsageError(app, command == commands.end() ? nullptr : command->app, e, argc, argv);
  }
  docmatch::data::hdf5::ShowErrorStacks(verbose);
  docmatch::dist::ShowBacktraces(verbose);
  docmatch::io::AllowUnverifiedFolders(allow_unverified);
  if (dump_config) {
    std::cout << app.config_to_str(/*default_also=*/true, /*write_description=*/false);
    return 0;
  }
  for (const auto& command : commands) {
    if (!command.app->parsed()) continue;
    const std::string who = "docmatch " + command.app->get_name();
    int status = 1;
    try {
      status = command.run();
    } catch (const docmatch::console::Interrupted& e) {
      std::cerr << who << ": " << e.what() << std::endl;
      return 128 + e.signal();
    } catch (const std::exception& e) {
      std::cerr << who << ": error: " << docmatch::dist::ErrorMessage(e) << std::endl;
      return 1;
    }
    // Hits and vectors printed to a full disk, a closed pipe or /dev/full
    // are lost: say so and fail, instead of exiting 0 with nothing written.
    std::cout.flush();
    if (!std::cout) {
      // The stream keeps no errno: one more byte to the broken output tells why.
      const bool failed_again = ::write(STDOUT_FILENO, "\n", 1) < 0;
      std::cerr << who << ": error: writing to standard output failed"
                << (failed_again ? std::string(": ") + std::strerror(errno) : std::string()) << std::endl;
      return 1;
    }
    return status;
  }
  return 1;
}
