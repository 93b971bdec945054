#pragma once
// One run, one writer: an advisory lock (flock) on DIR/.lock, held while a process trains in a
// run directory. The kernel drops it when the process ends however it ends, so a killed run
// never leaves a stale lock behind.
#include <memory>
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

// A name for a new run's directory under runs/, from the time it starts: runs/20261203-142501
// (-2, -3 when a run of the same second has it).
std::string timestamped_run_dir();

// A new run's directory, claimed before anything in it is checked or written: made when absent,
// locked, and only then checked to hold nothing else, so two runs started on one directory
// cannot both find it empty. Until keep(), destruction undoes the claim (the lock file, and the
// directory when this made it): a run that fails to start leaves nothing behind. The lock is
// held for the claim's life either way.
class NewRunDir {
 public:
  // Throws Error naming the directory (as "--out DIR") when it is a file, already holds a run,
  // holds anything else, is in use or cannot be made.
  explicit NewRunDir(const std::string& dir);
  ~NewRunDir();
  NewRunDir(const NewRunDir&) = delete;
  NewRunDir& operator=(const NewRunDir&) = delete;
  void keep() { kept_ = true; }

 private:
  void undo();

  std::string dir_;
  bool made_ = false;       // the directory, by this claim
  bool made_lock_ = false;  // its lock file, by this claim
  bool kept_ = false;
  std::unique_ptr<RunLock> lock_;
};

}  // namespace fp8lm
