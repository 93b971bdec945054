#pragma once
// One run, one writer: an advisory lock (flock) on DIR/.lock, held while a process trains in a
// run directory. The kernel drops it when the process ends however it ends, so a killed run
// never leaves a stale lock behind.
#include <string>

namespace fp8lm {

class RunLock {
 public:
  // Takes the lock at once or throws Error naming the directory (and the holder's pid, which
  // the lock file holds); the directory must exist.
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace fp8lm
