// `docmatch info`: the build and the machine, as JSON.
#include <iostream>

#include "cli/commands.h"
#include "dist/build_info.h"

namespace docmatch::cli {

Command AddInfoCommand(CLI::App* app) {
  CLI::App* sub =
      app->add_subcommand("info", "print what this build was compiled with (torch, CUDA, NCCL, MPI) as JSON");
  return {sub, [] {
            std::cout << dist::CurrentBuildInfo().ToJson().dump(2) << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
