// Writing files so that a full disk (or a quota, or a file size limit) is one
// clear error: the path and the OS's words ("No space left on device"), the
// partial file removed, nothing thrown from inside a library's destructor.
// Every file docmatch writes goes through here, or (HDF5) checks each call and
// its close and then says why with WriteError.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>

namespace docmatch::files {

// The writer torch's serializer takes (OutputArchive::save_to, torch::save):
// bytes in, the count taken out.
using ByteWriter = std::function<size_t(const void* data, size_t size)>;

// Creates `path` and runs save(writer). Every write goes to the file; the
// first failure is recorded and the rest are swallowed (torch's writer then
// finishes normally instead of throwing from its destructor), and once save
// returns the file is flushed to disk and the failure, if any, thrown naming
// the path and errno's message, the partial file removed.
void SaveThrough(const std::string& path, const std::function<void(const ByteWriter& writer)>& save);

// `bytes` to `path`, with the same rule.
void WriteFile(const std::string& path, const std::string& bytes);

// `bytes` to `path`.tmp, then renamed over `path`: a reader sees the old file
// or the new one, never half of one.
void ReplaceFile(const std::string& path, const std::string& bytes);

// `from`'s bytes to `to` (std::filesystem::copy_file reports a full disk as
// "Input/output error").
void CopyFile(const std::string& from, const std::string& to);

// The empty file a folder docmatch stages carries until it is renamed into
// place: it marks a leftover `X.tmp/` of a crash as docmatch's, so that a
// clean-up may remove it (io/own_outputs.h).
constexpr const char* kStagingMark = ".docmatch-staging";

// A folder written whole or not at all: write(staged) fills `output`.tmp
// (emptied first, then marked with kStagingMark), which then replaces
// `output`; if write throws, the staged folder is removed and `output` is
// left as it was. The caller has made sure that `output` and `output`.tmp,
// where they exist, are docmatch's (io::RemoveOwnOutputs).
void WriteFolder(const std::string& output, const std::function<void(const std::string& staged)>& write);

// "writing '<path>' failed: <strerror(error)>"
std::string WriteError(const std::string& path, int error);

// For a stream kept open (metrics.jsonl, TensorBoard events): throws
// WriteError(path, errno) once `out` has failed.
void CheckStream(const std::ostream& out, const std::string& path);

}  // namespace docmatch::files
