// Checksums of the files in a folder: recorded when a checkpoint, a best
// model, an export or an import is written, verified when it is read, so a
// damaged file is named instead of loaded.
//
//   checksums.json  {"algorithm": "crc32",
//                    "files": {"model.pt": {"bytes": 1234, "crc32": "89abcdef"}, ...}}
//
// CRC-32 (zlib's) finds the damage disks and copies do (flipped or overwritten
// bytes, truncation); it is not a defence against deliberate tampering.
#pragma once

#include <filesystem>
#include <string>

namespace docmatch::io {

constexpr const char* kChecksumFile = "checksums.json";

// zlib's CRC-32 of the whole file, as 8 hex digits; throws naming the file
// when it cannot be read.
std::string Crc32Of(const std::filesystem::path& path);

// Records every regular file directly in `folder` (the record itself aside).
void WriteChecksums(const std::string& folder);

// Whether a folder without checksums.json may be read (docmatch's global
// --allow-unverified). Off by default: such a folder (copied without its
// record, or from a docmatch before checksums) is refused naming the flag,
// since nothing could tell a damaged file in it from a sound one.
void AllowUnverifiedFolders(bool allow);

// Throws std::runtime_error naming folder/name when the file's size or CRC
// differs from the record, or when the record lists it and it is gone; and
// for a folder without a record unless AllowUnverifiedFolders(true). A file
// the record does not list (an older docmatch's) passes.
void VerifyChecksum(const std::string& folder, const std::string& name);

// VerifyChecksum for every file the record lists.
void VerifyChecksums(const std::string& folder);

}  // namespace docmatch::io
