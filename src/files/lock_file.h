// An exclusive advisory lock (flock) on a file, held while the object lives
// and released however the process ends (the kernel drops it with the
// descriptor). The file names its holder ("pid 812 on host n1"), so a second
// process that finds it held can say who holds it. A training run locks
// <run>/.lock for its life; an embeddings writer locks <file>.lock before it
// creates the file, since HDF5's create truncates the file another process
// is writing before HDF5's own lock refuses it.
#pragma once

#include <functional>
#include <string>

namespace docmatch::files {

class LockFile {
 public:
  // Takes the lock on `path` (created if absent). When another process holds
  // it, throws std::runtime_error(busy(holder)), `holder` being what the file
  // names ("pid 812 on host n1", or "holder unknown"). With `remove`, the
  // file is removed when the lock is let go.
  LockFile(std::string path, const std::function<std::string(const std::string& holder)>& busy, bool remove);
  ~LockFile();
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
  bool remove_;
};

}  // namespace docmatch::files
