#include "io/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
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

namespace {

namespace fs = std::filesystem;

// DIR holds nothing but a lock file (one left by a run that failed to start is no run).
void require_no_run(const std::string& dir) {
  if (fs::exists(dir + "/config.json")) {
    throw Error(fmt::format(
        "{} already holds a run; resume it with --resume {} or choose another --out", dir, dir));
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == ".lock") continue;
    throw Error(fmt::format(
        "--out {}: the directory is not empty and not an fp8lm run; choose another", dir));
  }
}

}  // namespace

NewRunDir::NewRunDir(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec)) && !fs::is_directory(dir, ec))
    throw Error(fmt::format(
        "--out {}: {}", dir,
        fs::exists(dir, ec) ? "a file, not a directory" : "a link to nothing (dangling symlink)"));
  if (!fs::exists(dir, ec)) {
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    made_ = fs::create_directory(dir, ec);
    if (ec)
      throw Error(fmt::format("--out {}: cannot create the directory: {}", dir, ec.message()));
  }
  made_lock_ = !fs::exists(dir + "/.lock", ec);
  try {
    lock_ = std::make_unique<RunLock>(dir);
  } catch (...) {
    if (made_) fs::remove(dir, ec);  // only when still empty: another process may be in it
    throw;
  }
  try {
    require_no_run(dir);
  } catch (...) {
    undo();
    throw;
  }
}

// The lock file goes while still held, so no other process locks it on its way out; a
// directory or lock file that was there before stays.
void NewRunDir::undo() {
  std::error_code ignored;
  if (made_) {
    fs::remove_all(dir_, ignored);
  } else if (made_lock_) {
    fs::remove(dir_ + "/.lock", ignored);
  }
  lock_.reset();
}

NewRunDir::~NewRunDir() {
  if (!kept_) undo();
}

std::string timestamped_run_dir() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  std::string dir = fmt::format("runs/{}", stamp);
  for (int n = 2; std::filesystem::exists(dir); ++n) dir = fmt::format("runs/{}-{}", stamp, n);
  return dir;
}

}  // namespace fp8lm
