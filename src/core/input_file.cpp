#include "core/input_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>

#include "fp8lm/error.h"

namespace fp8lm {
namespace {

// What a file that is not a regular one is, for the error; empty for a regular file.
const char* not_a_file(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "is a directory, not a file";
  if (S_ISFIFO(mode)) return "is a named pipe, not a file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device, not a file";
  if (S_ISSOCK(mode)) return "is a socket, not a file";
  return "is not a regular file";
}

std::string label_of(const std::string& path, std::string_view what) {
  const std::string shown = path.empty() ? "''" : path;
  return what.empty() ? shown : fmt::format("{} {}", what, shown);
}

}  // namespace

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name.size() <= NAME_MAX && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

std::string byte_size_text(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  return fmt::format("{:.{}f} {}", v, v < 10 && v != std::floor(v) ? 1 : 0, units[u]);
}

InputFile::InputFile(const std::string& path, std::string_view what)
    : label_(label_of(path, what)) {
  if (path.empty()) throw Error(fmt::format("{}: an empty path names no file", label_));
  // The type first, from the path (following links): opening a pipe would wait for a writer,
  // and opening a device may do something.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("{}: cannot be read: {}", label_, std::strerror(errno)));
  if (const char* why = not_a_file(st.st_mode); *why)
    throw Error(fmt::format("{}: {}", label_, why));
  // O_NONBLOCK: were a pipe put in its place since, the open still returns at once.
  do {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot be read: {}", label_, std::strerror(errno)));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const char* why = not_a_file(st.st_mode);
    ::close(fd_);
    throw Error(fmt::format("{}: {}", label_, *why ? why : "cannot be read"));
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

FileMapping::FileMapping(const InputFile& file) : size_(static_cast<size_t>(file.size())) {
  if (size_ == 0) return;  // mmap refuses a length of 0
  base_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    throw Error(fmt::format("{}: cannot be mapped: {}", file.label(), std::strerror(errno)));
  }
}

FileMapping::~FileMapping() {
  if (base_) ::munmap(base_, size_);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(other.fd_), size_(other.size_), label_(std::move(other.label_)) {
  other.fd_ = -1;
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

size_t InputFile::read_some(char* out, size_t n) const {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd_, out + done, n - done);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("{}: cannot be read: {}", label_, std::strerror(errno)));
    }
    done += static_cast<size_t>(r);
  }
  return done;
}

std::string InputFile::read_all(int64_t max_bytes) const {
  const auto too_large = [&](uint64_t n) {
    return Error(fmt::format("{}: {} ({} bytes), more than the {} this reads", label_,
                             byte_size_text(static_cast<int64_t>(n)), n,
                             byte_size_text(max_bytes)));
  };
  if (size_ > static_cast<uint64_t>(max_bytes)) throw too_large(size_);
  // The size is a hint: a file that grows as it is read is still cut off at the bound.
  std::string out(static_cast<size_t>(size_), '\0');
  size_t have = read_some(out.data(), out.size());
  for (;;) {
    if (have < out.size()) {
      out.resize(have);
      return out;
    }
    if (have > static_cast<size_t>(max_bytes)) throw too_large(have);
    out.resize(std::min<size_t>(static_cast<size_t>(max_bytes) + 1, out.size() + (64 << 10)));
    have += read_some(out.data() + have, out.size() - have);
  }
}

std::string read_input_file(const std::string& path, std::string_view what, int64_t max_bytes) {
  return InputFile(path, what).read_all(max_bytes);
}

InputStream::InputStream(const std::string& path, std::string_view what)
    : std::istream(nullptr), buffer_(InputFile(path, what)) {
  rdbuf(&buffer_);
  // A read error (the Error underflow throws) leaves the stream as itself, not as badbit.
  exceptions(std::ios::badbit);
}

InputStream::Buffer::int_type InputStream::Buffer::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  const size_t n = file.read_some(data.data(), data.size());
  if (n == 0) return traits_type::eof();
  setg(data.data(), data.data(), data.data() + n);
  return traits_type::to_int_type(*gptr());
}

}  // namespace fp8lm
