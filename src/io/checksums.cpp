// CRC-32 records of a folder's files (checksums.h).
#include "io/checksums.h"

#include <glog/logging.h>
#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <vector>

#include "console/error.h"
#include "files/file_writer.h"

namespace docmatch::io {
namespace fs = std::filesystem;

std::string Crc32Of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("ckpt", "cannot read '" + path.string() + "'");
  std::vector<char> buffer(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize n = in.gcount();
    if (n > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(n));
  }
  if (in.bad()) throw Error("ckpt", "reading '" + path.string() + "' failed");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", crc);
  return hex;
}

namespace {

std::atomic<bool> allow_unverified{false};

// The record, or null when the folder has none and that is allowed.
nlohmann::json ReadRecord(const std::string& folder) {
  const fs::path path = fs::path(folder) / kChecksumFile;
  if (!fs::exists(path)) {
    if (!allow_unverified) {
      throw Error("ckpt", "'" + folder + "' has no " + kChecksumFile +
                              ", so a damaged file in it could not be told from a sound one (copied without it, or "
                              "written by a docmatch before checksums); pass --allow-unverified to load it unchecked");
    }
    static std::mutex mutex;
    static std::set<std::string> warned;
    const std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(folder).second)
      LOG(WARNING) << "[ckpt] '" << folder << "' has no " << kChecksumFile
                   << ": its files are loaded unchecked (--allow-unverified)";
    return nullptr;
  }
  try {
    std::ifstream in(path);
    nlohmann::json record = nlohmann::json::parse(in);
    record.at("files").get<nlohmann::json::object_t>();
    return record;
  } catch (const nlohmann::json::exception& e) {
    throw Error("ckpt", "'" + path.string() + "' is damaged (" + e.what() + "): the folder's files cannot be checked");
  }
}

// The check of one file against its entry in the record.
void Verify(const nlohmann::json& expected, const fs::path& path) {
  if (!fs::exists(path)) {
    throw Error("ckpt", "'" + path.string() + "' is missing, though " + kChecksumFile + " lists it");
  }
  const auto bytes = static_cast<int64_t>(fs::file_size(path));
  const auto expected_bytes = expected.at("bytes").get<int64_t>();
  if (bytes != expected_bytes) {
    throw Error("ckpt", "'" + path.string() + "' is damaged: " + std::to_string(bytes) +
                            " bytes, but it was written with " + std::to_string(expected_bytes) + " (truncated?)");
  }
  const std::string crc = Crc32Of(path), expected_crc = expected.at("crc32").get<std::string>();
  if (crc != expected_crc) {
    throw Error("ckpt", "'" + path.string() + "' is damaged: its CRC-32 is " + crc + ", but it was written with " +
                            expected_crc);
  }
}

}  // namespace

void AllowUnverifiedFolders(bool allow) { allow_unverified = allow; }

void WriteChecksums(const std::string& folder) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == kChecksumFile || name == files::kStagingMark) continue;
    files[entry.path().filename().string()] = {{"bytes", entry.file_size()}, {"crc32", Crc32Of(entry.path())}};
  }
  files::WriteFile((fs::path(folder) / kChecksumFile).string(),
                   nlohmann::json{{"algorithm", "crc32"}, {"files", files}}.dump(2) + "\n");
}

void VerifyChecksum(const std::string& folder, const std::string& name) {
  const nlohmann::json record = ReadRecord(folder);
  if (record.is_null()) return;
  if (record["files"].contains(name)) {
    Verify(record["files"][name], fs::path(folder) / name);
  } else if (!allow_unverified) {
    // A record that leaves the file out cannot vouch for it (an edited or
    // foreign checksums.json): refused as a folder without one is.
    throw Error("ckpt", "'" + (fs::path(folder) / name).string() + "' is not listed in " + folder + "/" +
                            kChecksumFile + ", so a damaged copy could not be told from a sound one; restore the " +
                            "folder's " + kChecksumFile + ", or pass --allow-unverified to load it unchecked");
  }
}

void VerifyChecksums(const std::string& folder) {
  const nlohmann::json record = ReadRecord(folder);
  if (record.is_null()) return;
  for (const auto& [name, expected] : record["files"].items()) Verify(expected, fs::path(folder) / name);
}

}  // namespace docmatch::io
