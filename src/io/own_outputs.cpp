// Removing only what docmatch wrote (own_outputs.h).
#include "io/own_outputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
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

// The names `folder`'s checksums.json records: what docmatch wrote there.
std::vector<std::string> RecordedNames(const fs::path& folder) {
  std::ifstream in(folder / kChecksumFile);
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> names;
  if (!json.is_object() || !json.contains("files") || !json["files"].is_object()) return names;
  for (const auto& [name, _] : json["files"].items()) names.push_back(name);
  return names;
}

// A sentence-transformers module folder as export --format hf writes them:
// digits, an underscore, a name ("1_Pooling", "2_Dense").
bool ModuleFolder(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  const size_t underscore = name.find('_');
  std::error_code error;
  return entry.is_directory(error) && underscore != std::string::npos && underscore > 0 &&
         name.find_first_not_of("0123456789") == underscore && underscore + 1 < name.size();
}

}  // namespace

std::vector<std::string> CarryOverOthersFiles(const std::string& old_folder, const std::string& staged) {
  std::error_code error;
  std::vector<std::string> kept;
  if (!fs::is_directory(old_folder, error)) return kept;
  const std::vector<std::string> recorded = RecordedNames(old_folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(old_folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name == kChecksumFile || std::find(recorded.begin(), recorded.end(), name) != recorded.end() ||
        ModuleFolder(entry) || fs::exists(fs::symlink_status(fs::path(staged) / name, error))) {
      continue;
    }
    // Beside each other on one file system: a rename, never a copy. Where one
    // fails, those moved go back before the error, so the staged folder's
    // clean-up cannot take them.
    fs::rename(entry.path(), fs::path(staged) / name, error);
    if (error) {
      std::error_code ignored;
      for (const std::string& moved : kept) fs::rename(fs::path(staged) / moved, fs::path(old_folder) / moved, ignored);
      throw Error("io", "cannot keep '" + entry.path().string() + "' in the replaced folder: " + error.message() +
                            "; nothing was replaced");
    }
    kept.push_back(name);
  }
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
