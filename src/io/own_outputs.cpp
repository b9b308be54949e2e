// Removing only what docmatch wrote (own_outputs.h).
#include "io/own_outputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "console/error.h"
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

// What docmatch wrote in a model folder: the names its checksums.json
// records, that record itself, and the sentence-transformers module folders
// its modules.json names ("1_Pooling", "2_Dense").
std::set<std::string> DocmatchsNames(const fs::path& folder) {
  std::set<std::string> names = {kChecksumFile};
  std::ifstream record(folder / kChecksumFile);
  const nlohmann::json json = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("files") && json["files"].is_object()) {
    for (const auto& [name, _] : json["files"].items()) names.insert(name);
  }
  if (names.count("modules.json")) {
    std::ifstream in(folder / "modules.json");
    const nlohmann::json modules = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    for (const nlohmann::json& module : modules.is_array() ? modules : nlohmann::json::array()) {
      if (module.is_object() && module.contains("path") && module["path"].is_string()) {
        const std::string path = module["path"].get<std::string>();
        if (!path.empty() && path.find('/') == std::string::npos) names.insert(path);
      }
    }
  }
  return names;
}

// Moves each entry of `old_folder` that docmatch did not write and `folder`
// does not hold into `folder`; on a failed move, those moved go back first.
std::vector<std::string> CarryOverOthersFiles(const std::string& old_folder, const std::string& folder,
                                              const std::string& stage) {
  std::error_code error;
  std::vector<std::string> kept;
  const std::set<std::string> docmatchs = DocmatchsNames(old_folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(old_folder, error)) {
    const std::string name = entry.path().filename().string();
    if (docmatchs.count(name) || fs::exists(fs::symlink_status(fs::path(folder) / name, error))) continue;
    fs::rename(entry.path(), fs::path(folder) / name, error);  // beside each other: a rename, never a copy
    if (error) {
      std::error_code ignored;
      for (const std::string& moved : kept) fs::rename(fs::path(folder) / moved, fs::path(old_folder) / moved, ignored);
      throw Error(stage, "cannot move your '" + entry.path().string() + "' into the new " + folder + ": " +
                             error.message() + "; the replaced folder is kept whole as " + old_folder);
    }
    kept.push_back(name);
  }
  return kept;
}

}  // namespace

std::vector<std::string> ReplaceModelFolder(const std::string& output,
                                            const std::function<void(const std::string& staged)>& write,
                                            const std::string& stage) {
  std::error_code error;
  const std::string aside = output + ".replaced";
  if (fs::exists(fs::symlink_status(aside, error))) {
    throw Error(stage, "'" + aside + "' holds the model folder an earlier " + stage +
                           " was replacing when it stopped, with any files you had added to it: move out what you "
                           "want to keep and remove it, then run again");
  }
  const bool replacing = fs::exists(fs::symlink_status(output, error));
  if (replacing) {
    fs::rename(output, aside, error);
    if (error) throw Error(stage, "cannot set '" + output + "' aside to replace it: " + error.message());
  }
  try {
    files::WriteFolder(output, write);
  } catch (...) {
    std::error_code ignored;
    if (replacing && !fs::exists(fs::symlink_status(output, ignored))) fs::rename(aside, output, ignored);
    throw;
  }
  if (!replacing) return {};
  const std::vector<std::string> kept = CarryOverOthersFiles(aside, output, stage);
  fs::remove_all(aside, error);  // docmatch's own files alone are left in it now
  return kept;
}

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
