#include "io/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "fp8lm/error.h"

namespace fp8lm {

RunLock::RunLock(const std::string& dir) {
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(fmt::format("{}: cannot open the run's lock: {}", path, strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof(pid) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw Error(fmt::format("{}: cannot lock: {}", path, strerror(err)));
    const std::string holder = n > 0 ? fmt::format(" (pid {})", std::string(pid, size_t(n))) : "";
    throw Error(
        fmt::format("{} is in use: another fp8lm process{} is training in it", dir, holder));
  }
  // Who holds it, for the message a second process prints; best effort.
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // The pid is only for messages; the lock is held either way.
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace fp8lm
