#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <xxhash.h>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8lm/error.h"

namespace fp8lm {

namespace {
constexpr DType kDTypes[] = {DType::F32,  DType::BF16, DType::E4M3,
                             DType::E5M2, DType::I64,  DType::U8};
// Headers beyond this are not ours and not plausible: refuse before allocating.
constexpr uint64_t kMaxHeader = 100u << 20;
constexpr const char* kChecksumKey = "xxh3_64";

std::string hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

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
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("{}: header is not valid JSON", origin));
  }
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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: not a file", path));
  }
  size = static_cast<uint64_t>(sb.st_size);
  return fd;
}

// path.tmp, written and then renamed over path; removed if anything fails before that, so a
// full disk or a refused tensor keeps no half file.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("{}: cannot create: {}", tmp_, std::strerror(errno)));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) ::unlink(tmp_.c_str());
  }
  // At `offset`, or appended when it is negative.
  void write(std::span<const uint8_t> bytes, off_t offset = -1) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = offset < 0 ? ::write(fd_, bytes.data() + done, bytes.size() - done)
                                   : ::pwrite(fd_, bytes.data() + done, bytes.size() - done,
                                              offset + static_cast<off_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw Error(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
      done += static_cast<size_t>(w);
    }
  }
  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      throw Error(fmt::format("{}: cannot flush to disk: {}", path_, std::strerror(errno)));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      throw Error(fmt::format("{}: cannot rename into place: {}", path_, std::strerror(errno)));
    done_ = true;
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool done_ = false;
};

// A read-only private mapping of a whole file.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

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
    case DType::E5M2: {
      const Fp8Format f = dtype == DType::E4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
      for (size_t i = 0; i < n; ++i) out[i] = fp8_decode(bytes[i], f);
      break;
    }
    default:
      throw Error(fmt::format("tensor of dtype {} is not a float tensor", dtype_name(dtype)));
  }
  return out;
}

Safetensors Safetensors::parse(std::span<const uint8_t> file, const std::string& origin) {
  auto copy = std::make_shared<std::vector<uint8_t>>(file.begin(), file.end());
  const std::span<const uint8_t> view(*copy);
  return parse_views(view, origin, std::move(copy), /*mapped=*/false);
}

Safetensors Safetensors::read(const std::string& path) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, size);
  auto map = std::make_shared<Mapping>();
  map->size = static_cast<size_t>(size);
  if (map->size > 0) {
    void* addr = ::mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("{}: cannot map: {}", path, std::strerror(err)));
    }
    map->addr = addr;
    // Every tensor is read in order (verified, then copied out): let the disk read ahead.
    ::madvise(addr, map->size, MADV_SEQUENTIAL);
  }
  ::close(fd);  // the mapping keeps the file
  const std::span<const uint8_t> view(static_cast<const uint8_t*>(map->addr), map->size);
  return parse_views(view, path, std::move(map), /*mapped=*/true);
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
    const auto meta = metadata_of(header_json(read_at(8, n), path), path);
    ::close(fd);
    return meta;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

Safetensors Safetensors::parse_views(std::span<const uint8_t> file, const std::string& origin,
                                     std::shared_ptr<const void> storage, bool mapped) {
  const auto fail = [&](const std::string& what) {
    return Error(fmt::format("{}: {}", origin, what));
  };
  const uint64_t header_len =
      header_length(file.first(std::min<size_t>(8, file.size())), file.size(), origin);
  const auto data = file.subspan(8 + header_len);
  const nlohmann::json header = header_json(file.subspan(8, header_len), origin);

  Safetensors st;
  st.origin_ = origin;
  st.storage_ = std::move(storage);
  st.mapped_ = mapped;
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
  st.verify_checksums();
  return st;
}

// Files without checksums (written before them, or by other tools) are read as they are.
void Safetensors::verify_checksums() const {
  const auto it = metadata_.find(kChecksumKey);
  if (it == metadata_.end()) return;
  const auto sums = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!sums.is_object() || sums.size() != tensors_.size())
    throw Error(fmt::format("{}: its checksum list is damaged", origin_));
  for (auto it_t = tensors_.begin(); it_t != tensors_.end(); ++it_t) {
    const auto& [name, t] = *it_t;
    if (!sums.contains(name) || !sums[name].is_string())
      throw Error(fmt::format("{}: tensor '{}' has no checksum", origin_, name));
    // The disk reads the next tensor while this one is hashed.
    if (std::next(it_t) != tensors_.end()) advise(std::next(it_t)->second, MADV_WILLNEED);
    const std::string actual = hex64(XXH3_64bits(t.bytes.data(), t.bytes.size()));
    release(t);
    if (sums[name].get<std::string>() != actual) {
      throw Error(fmt::format("{}: tensor '{}' does not match its checksum: the file is damaged",
                              origin_, name));
    }
  }
}

void Safetensors::release(const TensorData& t) const {
  // Whole pages, including any a neighbour shares: a dropped page of a read-only private
  // mapping is read again from the file if touched, so this never changes what is seen.
  advise(t, MADV_DONTNEED);
}

void Safetensors::advise(const TensorData& t, int advice) const {
  if (!mapped_ || t.bytes.empty()) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.bytes.data()) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(t.bytes.data() + t.bytes.size());
  ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

const TensorData& Safetensors::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(fmt::format("{}: no tensor '{}'", origin_, name));
  return it->second;
}

std::vector<float> Safetensors::take_f32(const std::string& name) const {
  const TensorData& t = at(name);
  std::vector<float> v = t.to_f32();
  release(t);
  return v;
}

uint64_t SafetensorsWriter::Entry::bytes() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return static_cast<uint64_t>(n) * dtype_size(dtype);
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            Source source) {
  entries_[name] = {dtype, std::move(shape), std::move(source)};
}

void SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape,
                                std::vector<float> v) {
  add(name, DType::F32, std::move(shape), [v = std::move(v)](const Sink& sink) {
    sink(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
  });
}

void SafetensorsWriter::write(const std::string& path) const {
  // The header goes first but the checksums are known only after the data: it is written with
  // placeholders of the same width, then written again in place.
  const auto header_text = [&](const std::map<std::string, std::string>& sums) {
    nlohmann::json header = nlohmann::json::object();
    uint64_t offset = 0;
    for (const auto& [name, e] : entries_) {
      const uint64_t size = e.bytes();
      header[name] = {{"dtype", dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + size}}};
      offset += size;
    }
    nlohmann::json meta(metadata_);
    meta[kChecksumKey] = nlohmann::json(sums).dump();
    header["__metadata__"] = meta;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
      out[static_cast<size_t>(i)] = static_cast<char>(text.size() >> (8 * i));
    return out + text;
  };
  const auto as_bytes = [](const std::string& s) {
    return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  std::map<std::string, std::string> sums;
  for (const auto& [name, e] : entries_) sums[name] = hex64(0);
  const std::string placeholder = header_text(sums);

  AtomicFile file(path);
  file.write(as_bytes(placeholder));
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                       &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  for (const auto& [name, e] : entries_) {
    const uint64_t expected = e.bytes();
    uint64_t written = 0;
    XXH3_64bits_reset(state.get());
    e.source([&](std::span<const uint8_t> bytes) {
      XXH3_64bits_update(state.get(), bytes.data(), bytes.size());
      file.write(bytes);
      written += bytes.size();
    });
    if (written != expected) {
      throw Error(fmt::format("internal: tensor '{}' gave {} bytes for {} expected", name, written,
                              expected));
    }
    sums[name] = hex64(XXH3_64bits_digest(state.get()));
  }
  const std::string header = header_text(sums);
  if (header.size() != placeholder.size())
    throw Error(fmt::format("internal: {}: the header changed size", path));
  file.write(as_bytes(header), 0);
  file.commit();
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

}  // namespace fp8lm
