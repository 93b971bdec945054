#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8lm/error.h"

namespace fp8lm {

namespace {
constexpr DType kDTypes[] = {DType::F32,  DType::BF16, DType::E4M3,
                             DType::E5M2, DType::I64,  DType::U8};
// Headers beyond this are not ours and not plausible: refuse before allocating.
constexpr uint64_t kMaxHeader = 100u << 20;
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
      std::memcpy(out.data(), bytes.data(), n * 4);
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
  const auto fail = [&](const std::string& what) {
    return Error(fmt::format("{}: {}", origin, what));
  };
  if (file.size() < 8)
    throw fail(fmt::format("{} bytes is too short for a safetensors file", file.size()));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[static_cast<size_t>(i)];
  if (header_len > file.size() - 8 || header_len > kMaxHeader) {
    throw fail(fmt::format("header length {} exceeds file size {}", header_len, file.size()));
  }
  const auto data = file.subspan(8 + header_len);
  nlohmann::json header;
  try {
    header =
        nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<long>(header_len));
  } catch (const nlohmann::json::exception&) {
    throw fail("header is not valid JSON");
  }
  if (!header.is_object()) throw fail("header is not a JSON object");

  Safetensors st;
  st.origin_ = origin;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw fail(fmt::format("metadata '{}' is not a string", k));
        st.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
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
    t.bytes.assign(data.begin() + static_cast<long>(begin), data.begin() + static_cast<long>(end));
    ranges.emplace_back(begin, end);
    st.tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) throw fail("tensor data ranges overlap");
  }
  return st;
}

Safetensors Safetensors::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open", path));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  return parse(bytes, path);
}

void Safetensors::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                      const void* data) {
  TensorData t{dtype, std::move(shape), {}};
  const size_t n = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  t.bytes.resize(n);
  if (n) std::memcpy(t.bytes.data(), data, n);
  tensors_[name] = std::move(t);
}

const TensorData& Safetensors::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(fmt::format("{}: no tensor '{}'", origin_, name));
  return it->second;
}

void Safetensors::write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    header[name] = {{"dtype", dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(text.size() >> (8 * i));
  bytes.insert(bytes.end(), text.begin(), text.end());
  for (const auto& [name, t] : tensors_) bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
  write_file_atomic(path, bytes);
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());  // a full disk keeps no half file
      throw Error(fmt::format("{}: write failed: {}", path, std::strerror(err)));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: cannot flush to disk: {}", path, std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error(fmt::format("{}: cannot rename into place: {}", path, std::strerror(errno)));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace fp8lm
