#pragma once
// One way to open a file the program reads (issue 30): only a regular file, so that a named
// pipe never blocks the program and a device (/dev/zero) never feeds it without end; errno's
// reason when it cannot be read; and a bound on what is read whole into memory.
#include <cstddef>
#include <cstdint>
#include <istream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm {

// Bounds on whole-file reads: far above any real file of the kind, far below memory.
inline constexpr int64_t kLineFileBytes = int64_t{64} << 10;        // checkpoints/latest
inline constexpr int64_t kJsonFileBytes = int64_t{64} << 20;        // config.json, manifests
inline constexpr int64_t kTokenizerFileBytes = int64_t{256} << 20;  // tokenizer.json, merges
inline constexpr int64_t kTextFileBytes = int64_t{16} << 30;        // a text to encode, a corpus

// A regular file opened for reading: its descriptor (closed with it) and its size. Error
// "<what> <path>: <why>" (or "<path>: <why>" when `what` is empty) for a missing file, a
// directory, a named pipe, a device, a socket, or one that cannot be opened (errno's reason,
// e.g. "Permission denied"). The type is checked before the open, and again on the descriptor,
// so no open ever waits for a pipe's writer.
class InputFile {
 public:
  InputFile(const std::string& path, std::string_view what);
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile& operator=(InputFile&&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // "<what> <path>", as the errors name the file.
  const std::string& label() const { return label_; }
  // Hands the descriptor to the caller, who closes it.
  int release();
  // Reads up to n bytes (fewer only at the end); Error naming the file on a read error.
  size_t read_some(char* out, size_t n) const;
  // The whole file; Error when it is larger than max_bytes (checked as it is read, too).
  std::string read_all(int64_t max_bytes) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string label_;
};

// A regular file's whole contents mapped read-only, unmapped with this object: a reader that
// checks the bytes in its constructor and throws leaves no mapping behind (a long process that
// is refused many files would otherwise run out of mappings). An empty file maps to no bytes.
class FileMapping {
 public:
  explicit FileMapping(const InputFile& file);  // Error "<label>: cannot be mapped: <why>"
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
  size_t size() const { return size_; }

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
};

// The whole contents of the regular file at path, at most max_bytes of them (InputFile's
// errors, and "<what> <path>: N bytes, more than the M this reads").
std::string read_input_file(const std::string& path, std::string_view what, int64_t max_bytes);

// A stream over a checked regular file, for readers that go through a large input line by
// line; a read error is thrown as Error naming the file.
class InputStream : public std::istream {
 public:
  InputStream(const std::string& path, std::string_view what);
  const std::string& label() const { return buffer_.file.label(); }

 private:
  struct Buffer : std::streambuf {
    explicit Buffer(InputFile f) : file(std::move(f)), data(1 << 16) {}
    int_type underflow() override;
    InputFile file;
    std::vector<char> data;
  };
  Buffer buffer_;
};

// A name a file list gives (an HF index's shard, a dataset's shard or tokenizer) that is a file
// in the list's own directory: not empty, ".", ".." or a path ("../x", "/dev/zero"), and no
// longer than a file name can be (NAME_MAX), which the system would refuse to look up.
bool is_plain_file_name(std::string_view name);

// "12.5 MiB": a byte count as the errors give it.
std::string byte_size_text(int64_t bytes);

}  // namespace fp8lm
