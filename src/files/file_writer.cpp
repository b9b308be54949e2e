// POSIX writes with the error kept and reported once (file_writer.h).
#include "files/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace docmatch::files {

std::string WriteError(const std::string& path, int error) {
  return "writing '" + path + "' failed: " + std::strerror(error != 0 ? error : EIO);
}

void SaveThrough(const std::string& path, const std::function<void(const ByteWriter& writer)>& save) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create '" + path + "': " + std::strerror(errno));
  int error = 0;
  const ByteWriter writer = [&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    for (size_t done = 0; error == 0 && done < size;) {
      const ssize_t n = ::write(fd, bytes + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        error = n < 0 ? errno : ENOSPC;
      else
        done += static_cast<size_t>(n);
    }
    return size;  // torch goes on; the error is reported below
  };
  try {
    save(writer);
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  if (error == 0 && ::fsync(fd) != 0 && errno != EINVAL) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(path.c_str());
    throw std::runtime_error(WriteError(path, error));
  }
}

void WriteFile(const std::string& path, const std::string& bytes) {
  SaveThrough(path, [&](const ByteWriter& write) { write(bytes.data(), bytes.size()); });
}

void ReplaceFile(const std::string& path, const std::string& bytes) {
  const std::string staged = path + ".tmp";
  WriteFile(staged, bytes);
  if (::rename(staged.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(staged.c_str());
    throw std::runtime_error("replacing '" + path + "' failed: " + std::strerror(error));
  }
}

void CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + from + "': " + std::strerror(errno));
  WriteFile(to, std::string(std::istreambuf_iterator<char>(in), {}));
}

void WriteFolder(const std::string& output, const std::function<void(const std::string& staged)>& write) {
  namespace fs = std::filesystem;
  const std::string staged = output + ".tmp";
  fs::remove_all(staged);
  fs::create_directories(staged);
  try {
    WriteFile(staged + "/" + kStagingMark, "");
    write(staged);
    fs::remove(staged + "/" + kStagingMark);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staged, ignored);  // nothing half-written stays behind
    throw;
  }
  fs::remove_all(output);
  fs::rename(staged, output);
}

void CheckStream(const std::ostream& out, const std::string& path) {
  if (!out) throw std::runtime_error(WriteError(path, errno));
}

}  // namespace docmatch::files
