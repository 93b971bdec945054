#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include <xxhash.h>

#include "core/bf16.h"
#include "core/finite.h"
#include "core/fp8_dtype.h"
#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"

namespace fp8lm {

namespace {
constexpr DType kDTypes[] = {DType::F32,  DType::BF16, DType::E4M3,
                             DType::E5M2, DType::I64,  DType::U8};
// Headers beyond this are not ours and not plausible: refuse before allocating.
constexpr uint64_t kMaxHeader = 100u << 20;

// The header's length from the file's first 8 bytes; Error unless it fits in the file.
uint64_t header_length(std::span<const uint8_t> first8, uint64_t file_size,
                       const std::string& origin) {
  if (first8.size() < 8 || file_size < 8) {
    throw Error(fmt::format("{}: {} bytes is too short for a safetensors file", origin, file_size));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[static_cast<size_t>(i)];
  if (n > file_size - 8 || n > kMaxHeader) {
    throw Error(fmt::format("{}: header length {} exceeds file size {}", origin, n, file_size));
  }
  return n;
}

nlohmann::json header_json(std::span<const uint8_t> text, const std::string& origin) {
  const nlohmann::json header =
      parse_json({reinterpret_cast<const char*>(text.data()), text.size()}, origin + ": header");
  if (!header.is_object()) throw Error(fmt::format("{}: header is not a JSON object", origin));
  return header;
}

std::map<std::string, std::string> metadata_of(const nlohmann::json& header,
                                               const std::string& origin) {
  std::map<std::string, std::string> meta;
  if (!header.contains("__metadata__")) return meta;
  const nlohmann::json& entry = header["__metadata__"];
  if (!entry.is_object()) throw Error(fmt::format("{}: __metadata__ is not an object", origin));
  for (const auto& [k, v] : entry.items()) {
    if (!v.is_string()) throw Error(fmt::format("{}: metadata '{}' is not a string", origin, k));
    meta[k] = v.get<std::string>();
  }
  return meta;
}

// A descriptor of the regular file at path, and its size; Error (naming it) otherwise.
int open_regular_file(const std::string& path, uint64_t& size) {
  InputFile file(path, "");
  size = file.size();
  return file.release();
}

// A read-only private mapping of a whole file, and the file (for TensorReader's preads).
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  int fd = -1;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
    if (fd >= 0) ::close(fd);
  }
};

// What TensorReader reads from the file at a time: small enough to be hashed and checked
// while in the cache, large enough that a system call costs nothing beside it (dd's bs=1M).
constexpr size_t kReadPiece = size_t{1} << 20;

}  // namespace

int64_t TensorData::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<float> TensorData::to_f32() const {
  const auto n = static_cast<size_t>(numel());
  std::vector<float> out(n);
  switch (dtype) {
    case DType::F32:
      if (n) std::memcpy(out.data(), bytes.data(), n * 4);
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        bf16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      break;
    case DType::E4M3:
    case DType::E5M2:
      for (size_t i = 0; i < n; ++i) out[i] = fp8_decode(bytes[i], dtype);
      break;
    default:
      throw Error(fmt::format("tensor of dtype {} is not a float tensor", dtype_name(dtype)));
  }
  return out;
}

Safetensors Safetensors::parse(std::span<const uint8_t> file, const std::string& origin) {
  auto copy = std::make_shared<std::vector<uint8_t>>(file.begin(), file.end());
  const std::span<const uint8_t> view(*copy);
  return parse_views(view, origin, std::move(copy), /*fd=*/-1);
}

Safetensors Safetensors::read(const std::string& path, Verify verify) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, size);
  auto map = std::make_shared<Mapping>();
  map->fd = fd;
  map->size = static_cast<size_t>(size);
  if (map->size > 0) {
    void* addr = ::mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED)
      throw Error(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
    map->addr = addr;
    // Each tensor is read front to back: let the disk read ahead.
    ::madvise(addr, map->size, MADV_SEQUENTIAL);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  const std::span<const uint8_t> view(static_cast<const uint8_t*>(map->addr), map->size);
  Safetensors st = parse_views(view, path, std::move(map), fd);
  if (verify == Verify::AtOpen) {
    for (auto it = st.tensors_.begin(); it != st.tensors_.end(); ++it) {
      // The disk reads the next tensor while this one is hashed.
      if (std::next(it) != st.tensors_.end()) st.advise(std::next(it)->second, MADV_WILLNEED);
      st.verify(it->first, it->second);
      st.release(it->second);
    }
  }
  return st;
}

std::map<std::string, std::string> Safetensors::read_metadata(const std::string& path) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, size);
  const auto read_at = [&](uint64_t offset, uint64_t n) {
    std::vector<uint8_t> bytes(n);
    const ssize_t got = ::pread(fd, bytes.data(), n, static_cast<off_t>(offset));
    bytes.resize(got > 0 ? static_cast<size_t>(got) : 0);
    return bytes;
  };
  try {
    const uint64_t n = header_length(read_at(0, 8), size, path);
    const nlohmann::json header = header_json(read_at(8, n), path);
    const auto meta = metadata_of(header, path);
    checked_checksums(header, meta, path);
    ::close(fd);
    return meta;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

Safetensors Safetensors::parse_views(std::span<const uint8_t> file, const std::string& origin,
                                     std::shared_ptr<const void> storage, int fd) {
  const auto fail = [&](const std::string& what) {
    return Error(fmt::format("{}: {}", origin, what));
  };
  const uint64_t header_len =
      header_length(file.first(std::min<size_t>(8, file.size())), file.size(), origin);
  const auto data = file.subspan(8 + header_len);
  const nlohmann::json header = header_json(file.subspan(8, header_len), origin);

  Safetensors st;
  st.origin_ = origin;
  st.data_ = file.data();
  st.storage_ = std::move(storage);
  st.fd_ = fd;
  st.metadata_ = metadata_of(header, origin);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      throw fail(fmt::format("tensor '{}': malformed entry", name));
    }
    TensorData t;
    const std::string dt = entry["dtype"].get<std::string>();
    const auto it = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                 [&](DType d) { return dtype_name(d) == dt; });
    if (it == std::end(kDTypes)) throw fail(fmt::format("tensor '{}': unknown dtype {}", name, dt));
    t.dtype = *it;
    uint64_t count = 1;
    for (const auto& s : entry["shape"]) {
      if (!s.is_number_unsigned()) throw fail(fmt::format("tensor '{}': bad shape", name));
      const uint64_t dim = s.get<uint64_t>();
      if (dim != 0 && count > (uint64_t{1} << 40) / dim)
        throw fail(fmt::format("tensor '{}': shape too large", name));
      count *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw fail(fmt::format("tensor '{}': bad data_offsets", name));
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data.size()) {
      throw fail(fmt::format("tensor '{}': data_offsets [{}, {}] out of range (data is {} bytes)",
                             name, begin, end, data.size()));
    }
    if (end - begin != count * dtype_size(t.dtype)) {
      throw fail(fmt::format("tensor '{}': {} bytes do not hold shape of {} {} values", name,
                             end - begin, count, dt));
    }
    t.bytes = data.subspan(begin, end - begin);
    ranges.emplace_back(begin, end);
    st.tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) throw fail("tensor data ranges overlap");
  }
  // The tensors cover the data exactly, as the format requires: bytes that belong to no tensor
  // are not what fp8lm wrote (an appended payload, a file cut and patched).
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin > covered)
      throw fail(
          fmt::format("{} bytes at data offset {} belong to no tensor", begin - covered, covered));
    covered = end;
  }
  if (covered < data.size())
    throw fail(fmt::format("{} bytes after the last tensor's data belong to no tensor",
                           data.size() - covered));
  st.read_checksums(header);
  // A file held in memory is small (a fuzzer's input, a test's bytes): checked whole at once.
  if (fd < 0)
    for (const auto& [name, t] : st.tensors_) st.verify(name, t);
  return st;
}

// Files without checksums (written before them, or by other tools) are read as they are.
void Safetensors::read_checksums(const nlohmann::json& header) {
  checksums_ = checked_checksums(header, metadata_, origin_);
  if (checksums_.empty()) return;
  for (const auto& [name, sum] : checksums_) {
    if (!tensors_.count(name))
      throw Error(
          fmt::format("{}: tensor '{}' is missing (its checksum is listed)", origin_, name));
  }
  for (const auto& [name, t] : tensors_) {
    if (!checksums_.count(name))
      throw Error(fmt::format("{}: tensor '{}' has no checksum", origin_, name));
  }
}

void Safetensors::verify(const std::string& name, const TensorData& t) const {
  if (checksums_.empty() || verified_.count(name)) return;
  check_digest(name, XXH3_64bits(t.bytes.data(), t.bytes.size()));
}

void Safetensors::check_digest(const std::string& name, uint64_t digest) const {
  if (hex64(digest) != checksums_.at(name)) {
    throw Error(fmt::format("{}: tensor '{}' does not match its checksum: the file is damaged",
                            origin_, name));
  }
  verified_.insert(name);
}

void Safetensors::release(const TensorData& t) const {
  // Whole pages, including any a neighbour shares: a dropped page of a read-only private
  // mapping is read again from the file if touched, so this never changes what is seen.
  advise(t, MADV_DONTNEED);
}

void Safetensors::advise(const TensorData& t, int advice) const {
  if (fd_ < 0 || t.bytes.empty()) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.bytes.data()) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(t.bytes.data() + t.bytes.size());
  ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

const TensorData& Safetensors::entry(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(fmt::format("{}: no tensor '{}'", origin_, name));
  return it->second;
}

const TensorData& Safetensors::at(const std::string& name) const {
  const TensorData& t = entry(name);
  if (!checksums_.empty() && !verified_.count(name)) {
    advise(t, MADV_WILLNEED);  // the whole tensor asked of the disk at once
    verify(name, t);
  }
  return t;
}

std::vector<std::string> Safetensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  std::ranges::sort(out, {}, [&](const std::string& name) { return position(name); });
  return out;
}

uint64_t Safetensors::position(const std::string& name) const {
  return static_cast<uint64_t>(entry(name).bytes.data() - data_);
}

std::vector<float> Safetensors::take_f32(const std::string& name) const {
  const TensorData& t = at(name);
  std::vector<float> v = t.to_f32();
  release(t);
  return v;
}

TensorReader::TensorReader(const Safetensors& file, const std::string& name, Check check)
    : file_(file),
      name_(name),
      t_(file.entry(name)),
      offset_(static_cast<off_t>(file.position(name))),
      check_(check) {
  if (!file.checksums_.empty() && !file.verified_.count(name)) {
    hash_ = XXH3_createState();
    if (!hash_) throw std::bad_alloc();
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(hash_));
  }
  if (file.fd_ < 0) return;
  // The whole tensor asked of the disk at once, and the one after it in the file (loads go in
  // the file's order): read() finds it arriving, and the disk has work while this is hashed.
  const TensorData* next = nullptr;
  for (const auto& [other, t] : file.tensors_)
    if (t.bytes.data() > t_.bytes.data() && (!next || t.bytes.data() < next->bytes.data()))
      next = &t;
  const uint8_t* end = next ? next->bytes.data() + next->bytes.size() : t_.bytes.data() + bytes();
  ::posix_fadvise(file.fd_, offset_, end - t_.bytes.data(), POSIX_FADV_WILLNEED);
}

TensorReader::~TensorReader() {
  XXH3_freeState(static_cast<XXH3_state_t*>(hash_));
}

DType TensorReader::dtype() const {
  return t_.dtype;
}
const std::vector<int64_t>& TensorReader::shape() const {
  return t_.shape;
}
uint64_t TensorReader::bytes() const {
  return t_.bytes.size();
}

void TensorReader::read(std::span<uint8_t> piece) {
  if (piece.size() > t_.bytes.size() - done_)
    throw Error(
        fmt::format("internal: {}: read past the end of tensor '{}'", file_.origin_, name_));
  for (size_t at = 0; at < piece.size();) {
    const auto part = piece.subspan(at, std::min(kReadPiece, piece.size() - at));
    if (file_.fd_ < 0) {
      std::memcpy(part.data(), t_.bytes.data() + done_, part.size());
    } else {
      for (size_t got = 0; got < part.size();) {
        const ssize_t r = ::pread(file_.fd_, part.data() + got, part.size() - got,
                                  offset_ + static_cast<off_t>(done_ + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          throw Error(
              fmt::format("{}: cannot read tensor '{}': {}", file_.origin_, name_,
                          r < 0 ? std::strerror(errno) : "the file is shorter than it was"));
        }
        got += static_cast<size_t>(r);
      }
    }
    if (hash_) XXH3_64bits_update(static_cast<XXH3_state_t*>(hash_), part.data(), part.size());
    if (check_ == Check::ChecksumAndFinite) finite_ &= all_finite_f32_bytes(part);
    done_ += part.size();
    at += part.size();
  }
}

bool TensorReader::finish() {
  if (done_ != t_.bytes.size()) {
    throw Error(fmt::format("internal: {}: {} of tensor '{}''s {} bytes read", file_.origin_, done_,
                            name_, t_.bytes.size()));
  }
  if (hash_) file_.check_digest(name_, XXH3_64bits_digest(static_cast<XXH3_state_t*>(hash_)));
  // Read once: its pages need not stay in the page cache, taking memory the run may want.
  if (file_.fd_ >= 0)
    ::posix_fadvise(file_.fd_, offset_, static_cast<off_t>(t_.bytes.size()), POSIX_FADV_DONTNEED);
  return finite_;
}

}  // namespace fp8lm
