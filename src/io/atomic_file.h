#pragma once
// Files written whole or not at all: a temp file beside the target, fsync, rename over it,
// fsync of the directory. A full disk or a failure half way keeps no half file and leaves the
// old one as it was.
#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fp8lm {

// path.tmp, written and then renamed over path by commit(); removed if anything fails before.
// A large file goes to the disk as it is written, a window at a time, rather than all at the
// fsync: the disk streams while the next window is made, and the page cache holds at most two
// windows of it (a 7 GB checkpoint would otherwise fill the cache of a machine whose memory
// the trainer already uses).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // Error naming path.tmp when it cannot be created
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();
  // At `offset`, or appended when it is negative. Error naming the file and errno's reason.
  void write(std::span<const uint8_t> bytes, off_t offset = -1);
  void commit();

 private:
  static constexpr off_t kWindow = off_t{64} << 20;
  void flush_window();
  void sync_range(off_t start, unsigned flags) const;
  [[noreturn]] void fail(const char* what) const;

  std::string path_, tmp_;
  int fd_ = -1;
  bool done_ = false;
  off_t appended_ = 0, flushed_ = 0;
};

// Appends bytes to the file open as fd (path, for the error) whole or not at all: a failed write
// (a full disk) is cut back off, so the file never holds a torn record, and Error names it.
void append_whole(int fd, const std::string& path, std::string_view bytes);

// Writes bytes (or text) to path atomically (AtomicFile).
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
void write_text_atomic(const std::string& path, const std::string& text);

// Renames a written file or directory over `to` and fsyncs the directory that holds it, so the
// new name survives a power cut; Error naming `to` when the rename fails.
void rename_into_place(const std::string& from, const std::string& to);

}  // namespace fp8lm
