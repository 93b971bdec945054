#include "io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "fp8lm/error.h"

namespace fp8lm {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot create: {}", tmp_, std::strerror(errno)));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(std::span<const uint8_t> bytes, off_t offset) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = offset < 0 ? ::write(fd_, bytes.data() + done, bytes.size() - done)
                                 : ::pwrite(fd_, bytes.data() + done, bytes.size() - done,
                                            offset + static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write failed");
    done += static_cast<size_t>(w);
  }
  if (offset < 0) {
    appended_ += static_cast<off_t>(bytes.size());
    while (appended_ - flushed_ >= kWindow) flush_window();
  }
}

void AtomicFile::commit() {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("cannot flush to disk");
  rename_into_place(tmp_, path_);
  done_ = true;
}

// Window k is started, then window k-1 waited for and dropped from the cache.
void AtomicFile::flush_window() {
  const off_t start = flushed_;
  sync_range(start, SYNC_FILE_RANGE_WRITE);
  if (start >= kWindow) {
    sync_range(start - kWindow,
               SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    ::posix_fadvise(fd_, start - kWindow, kWindow, POSIX_FADV_DONTNEED);
  }
  flushed_ += kWindow;
}

// A file system without sync_file_range leaves it all to the fsync of commit().
void AtomicFile::sync_range(off_t start, unsigned flags) const {
  if (::sync_file_range(fd_, start, kWindow, flags) != 0 && errno != EINVAL && errno != ESPIPE &&
      errno != ENOSYS)
    fail("write failed");
}

void AtomicFile::fail(const char* what) const {
  throw Error(fmt::format("{}: {}: {}", path_, what, std::strerror(errno)));
}

void rename_into_place(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error(fmt::format("{}: cannot rename into place: {}", to, std::strerror(errno)));
  const std::string dir = std::filesystem::path(to).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

void append_whole(int fd, const std::string& path, std::string_view bytes) {
  const off_t before = ::lseek(fd, 0, SEEK_END);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w >= 0) {
      done += static_cast<size_t>(w);
    } else if (errno != EINTR) {
      const int err = errno;
      if (before >= 0 && ::ftruncate(fd, before) != 0) {
        // Nothing more to do: the error below is what the user needs.
      }
      throw Error(fmt::format("{}: cannot write: {}", path, std::strerror(err)));
    }
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace fp8lm
