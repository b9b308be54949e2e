// An exclusive flock naming its holder (lock_file.h).
#include "files/lock_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace docmatch::files {

LockFile::LockFile(std::string path, const std::function<std::string(const std::string& holder)>& busy, bool remove)
    : path_(std::move(path)), remove_(remove) {
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot open '" + path_ + "': " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP) {
        // A file system without flock (Lustre mounted without it): no lock
        // to take, so none to hold; go on as before locks were taken.
        std::fprintf(stderr, "warning: '%s' cannot be locked (%s): a second writer would not be stopped\n",
                     path_.c_str(), std::strerror(error));
        ::close(fd_);
        fd_ = -1;
        if (remove_) ::unlink(path_.c_str());
        return;
      }
      std::string holder;
      std::ifstream in(path_);
      std::getline(in, holder);
      ::close(fd_);
      fd_ = -1;
      if (error == EWOULDBLOCK) throw std::runtime_error(busy(holder.empty() ? "holder unknown" : holder));
      throw std::runtime_error("cannot lock '" + path_ + "': " + std::strerror(error));
    }
    // The file locked must still be the one at the path: a holder that let
    // go removes it, and a lock on the removed file would exclude no one.
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      break;
    }
    ::close(fd_);
  }
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const std::string holder = "pid " + std::to_string(::getpid()) + " on host " + host;
  // Only for the message of a process that finds the lock held: on a full
  // disk it stays empty ("holder unknown"), and the lock holds all the same.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, holder.data(), holder.size(), 0);
  }
}

LockFile::~LockFile() {
  if (fd_ < 0) return;
  if (remove_) ::unlink(path_.c_str());  // while held: no other process is between its open and its lock here
  ::close(fd_);                          // releases the flock
}

}  // namespace docmatch::files
