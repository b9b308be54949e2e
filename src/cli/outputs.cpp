// The output checks of outputs.h.
#include "cli/outputs.h"

#include "cli/inspect_runs.h"
#include "console/error.h"

#include <filesystem>
#include <stdexcept>

namespace docmatch::cli {
namespace fs = std::filesystem;
namespace {

// `inner` is `outer` or lies inside it (both absolute and normal).
bool Within(const fs::path& inner, const fs::path& outer) {
  const fs::path relative = inner.lexically_relative(outer);
  return !relative.empty() && *relative.begin() != "..";
}

}  // namespace

void RefuseProtectedOutput(const std::string& stage, const std::string& output,
                           const std::vector<std::string>& inputs) {
  const auto refuse = [&](const std::string& why) {
    throw Error(stage, "will not write '" + output + "': " + why + "; give an --output outside it");
  };
  std::error_code ignored;
  if (fs::is_symlink(fs::path(output).lexically_normal(), ignored)) refuse("it is a symbolic link (a run's latest?)");
  const fs::path target = fs::weakly_canonical(fs::absolute(output));
  for (const std::string& input : inputs) {
    if (input.empty() || input == "-") continue;
    const fs::path read = fs::weakly_canonical(fs::absolute(input));
    if (Within(target, read) || Within(read, target)) refuse("the " + stage + " reads '" + input + "'");
  }
  if (fs::exists(target / "trainer.json", ignored)) refuse("it is a training checkpoint");
  for (fs::path folder = target; !folder.empty() && folder != folder.root_path(); folder = folder.parent_path()) {
    if (IsRunFolder(folder.string())) refuse("it lies in the training run '" + folder.string() + "'");
  }
}

void RefuseRunOverInputs(const std::string& stage, const std::string& run, const std::vector<std::string>& inputs,
                         bool fresh) {
  const fs::path target = fs::weakly_canonical(fs::absolute(run));
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    const fs::path read = fs::weakly_canonical(fs::absolute(input));
    if (Within(target, read)) {
      throw Error(stage, "--run '" + run + "' is '" + input +
                             "' or lies inside it, which this run reads: its "
                             "checkpoints, logs and best/ would be written among that input's files; give a --run of "
                             "its own (runs/<name>)");
    }
    if (fresh && Within(read, target)) {
      throw Error(stage, "--fresh would remove the checkpoints of '" + run + "', and this run reads '" + input +
                             "' inside it: copy what it reads elsewhere first, or drop --fresh to resume");
    }
  }
}

}  // namespace docmatch::cli
