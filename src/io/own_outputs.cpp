// Removing only what docmatch wrote (own_outputs.h).
#include "io/own_outputs.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "files/file_writer.h"
#include "io/checksums.h"

namespace docmatch::io {
namespace fs = std::filesystem;
namespace {

const char* Name(Output output) {
  switch (output) {
    case Output::kCheckpoint:
      return "checkpoint";
    case Output::kModelFolder:
      return "model folder";
    case Output::kStaged:
      return "staged (partly written) folder";
    case Output::kLink:
      return "link to the latest checkpoint";
  }
  return "output";
}

// Whether `path` is a model folder's config.json as docmatch writes it
// ("format": "docmatch-model"; an HF-layout export keeps the key too).
bool DocmatchConfig(const fs::path& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error) || fs::file_size(path, error) > (1 << 20)) return false;
  std::ifstream in(path);
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return json.is_object() && json.value("format", "") == "docmatch-model";
}

// "" when `folder` holds every one of `files` as a regular file.
std::string Lacks(const fs::path& folder, std::initializer_list<const char*> files) {
  std::string missing;
  for (const char* file : files) {
    std::error_code error;
    if (!fs::is_regular_file(folder / file, error)) missing += std::string(missing.empty() ? "" : " and ") + file;
  }
  return missing.empty() ? "" : "has no " + missing;
}

}  // namespace

std::string NotDocmatchs(const std::string& path, Output output) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  if (!fs::exists(status)) return "";
  if (output == Output::kLink) return fs::is_symlink(status) ? "" : "is not a symbolic link";
  if (!fs::is_directory(status)) return "is not a folder";
  switch (output) {
    case Output::kCheckpoint:
      // trainer.json alone: checkpoints written before checksums (or copied
      // without them, loaded with --allow-unverified) are docmatch's too.
      return Lacks(path, {"trainer.json"});
    case Output::kModelFolder:
      return DocmatchConfig(fs::path(path) / "config.json")
                 ? ""
                 : "has no config.json of docmatch's (\"format\": \"docmatch-model\")";
    case Output::kStaged:
      if (fs::is_empty(path, error) || Lacks(path, {files::kStagingMark}).empty() ||
          Lacks(path, {kChecksumFile}).empty() || Lacks(path, {"trainer.json"}).empty() ||
          DocmatchConfig(fs::path(path) / "config.json")) {
        return "";
      }
      return std::string("has neither docmatch's staging mark (") + files::kStagingMark + "), nor a " + kChecksumFile +
             ", trainer.json or docmatch config.json";
    case Output::kLink:
      break;
  }
  return "";
}

void CheckOwnOutputs(const std::vector<std::pair<std::string, Output>>& paths, const std::string& why,
                     const std::string& advice) {
  for (const auto& [path, output] : paths) {
    const std::string lacks = NotDocmatchs(path, output);
    if (!lacks.empty()) {
      throw std::runtime_error(why + ": '" + path + "' " + lacks + ", so it is not docmatch's " + Name(output) +
                               " and is kept; " + advice);
    }
  }
}

size_t RemoveOwnOutputs(const std::vector<std::pair<std::string, Output>>& paths, const std::string& why,
                        const std::string& advice) {
  CheckOwnOutputs(paths, why, advice);
  size_t removed = 0;
  for (const auto& [path, output] : paths) {
    std::error_code error;
    if (!fs::exists(fs::symlink_status(path, error))) continue;
    fs::remove_all(path);
    ++removed;
  }
  return removed;
}

}  // namespace docmatch::io
