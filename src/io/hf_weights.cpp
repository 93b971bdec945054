#include "io/hf_weights.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <xxhash.h>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"

namespace fp8lm {

struct HfWeights::File {
  std::string path;
  uint64_t data_offset = 0;                      // 8 + the header's length
  std::map<std::string, std::string> checksums;  // XXH3-64 in hex by tensor; empty: none
};

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// A header beyond this is not a model's: refused before it is read.
constexpr uint64_t kMaxHeader = 100u << 20;

// Bytes per value of safetensors' dtypes; 0 for a name it does not define.
uint64_t value_bytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::vector<uint8_t> read_range(const std::string& path, uint64_t offset, uint64_t n) {
  const InputFile in(path, "");
  std::vector<uint8_t> bytes(n);
  for (uint64_t done = 0; done < n;) {
    const ssize_t r =
        ::pread(in.fd(), bytes.data() + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(fmt::format("{}: cannot read {} bytes at {}", path, n, offset));
    done += static_cast<uint64_t>(r);
  }
  return bytes;
}

// The file's checksums, from the metadata fp8lm writes ("xxh3_64": a JSON object by tensor).
std::map<std::string, std::string> checksums_of(const Json& header, const std::string& path) {
  std::map<std::string, std::string> out;
  if (!header.contains("__metadata__") || !header["__metadata__"].is_object()) return out;
  const Json& meta = header["__metadata__"];
  if (!meta.contains("xxh3_64")) return out;
  const Json sums = meta["xxh3_64"].is_string()
                        ? parse_json(meta["xxh3_64"].get<std::string>(), path + ": xxh3_64")
                        : Json();
  if (!sums.is_object()) throw Error(fmt::format("{}: its checksum list is damaged", path));
  for (const auto& [name, sum] : sums.items())
    if (sum.is_string()) out[name] = sum.get<std::string>();
  return out;
}

// The tensors of one safetensors file, from its header; Error naming what is malformed.
std::map<std::string, HfWeights::Tensor> read_file(const std::string& path) {
  const uint64_t size = InputFile(path, "").size();
  if (size < 8)
    throw Error(fmt::format("{}: {} bytes is too short for a safetensors file", path, size));
  uint64_t n = 0;
  std::memcpy(&n, read_range(path, 0, 8).data(), 8);  // little-endian, as the format is
  if (n > kMaxHeader || n > size - 8)
    throw Error(fmt::format("{}: header length {} does not fit; not a safetensors file", path, n));
  const std::vector<uint8_t> text = read_range(path, 8, n);
  const Json header =
      parse_json({reinterpret_cast<const char*>(text.data()), text.size()}, path + ": header");
  if (!header.is_object()) throw Error(fmt::format("{}: its header is not a JSON object", path));

  auto file = std::make_shared<HfWeights::File>();
  file->path = path;
  file->data_offset = 8 + n;
  file->checksums = checksums_of(header, path);
  const uint64_t data_bytes = size - 8 - n;
  std::map<std::string, HfWeights::Tensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const auto fail = [&, &name = name](const std::string& what) {
      return Error(fmt::format("{}: tensor '{}': {}", path, name, what));
    };
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2 || !e["data_offsets"][0].is_number_unsigned() ||
        !e["data_offsets"][1].is_number_unsigned())
      throw fail("malformed entry");
    HfWeights::Tensor t;
    t.file = file;
    t.dtype = e["dtype"].get<std::string>();
    uint64_t count = 1;
    for (const Json& s : e["shape"]) {
      if (!s.is_number_unsigned()) throw fail("bad shape");
      const auto dim = s.get<uint64_t>();
      if (dim != 0 && count > (uint64_t{1} << 40) / dim) throw fail("shape too large");
      count *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    t.begin = e["data_offsets"][0].get<uint64_t>();
    t.end = e["data_offsets"][1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_bytes) {
      throw fail(fmt::format("data_offsets [{}, {}] out of range (data is {} bytes)", t.begin,
                             t.end, data_bytes));
    }
    const uint64_t bytes = value_bytes(t.dtype);  // a dtype it lacks is named when read
    if (bytes && t.end - t.begin != count * bytes)
      throw fail(fmt::format("{} bytes do not hold {} {} values", t.end - t.begin, count, t.dtype));
    out.emplace(name, std::move(t));
  }
  return out;
}

std::map<std::string, HfWeights::Tensor> read_index(const std::string& dir) {
  const std::string index = dir + "/model.safetensors.index.json";
  const Json j = read_json_file(index, kJsonFileBytes);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(fmt::format("{}: no weight_map object", index));
  std::map<std::string, std::map<std::string, HfWeights::Tensor>> shards;
  std::map<std::string, HfWeights::Tensor> out;
  for (const auto& [name, f] : j["weight_map"].items()) {
    if (!f.is_string() || !is_plain_file_name(f.get<std::string>())) {
      throw Error(fmt::format("{}: weight_map maps '{}' to {}, not a file beside it", index, name,
                              f.dump()));
    }
    const std::string shard = f.get<std::string>();
    if (!shards.count(shard)) {
      // Not the throwing fs::exists: a name the system cannot look up (too long) is the
      // index's error, named as such.
      std::error_code ec;
      if (!fs::exists(dir + "/" + shard, ec))
        throw Error(fmt::format("{}: its shard {} is missing{}", index, shard.substr(0, 80),
                                ec ? fmt::format(" ({})", ec.message()) : ""));
      shards[shard] = read_file(dir + "/" + shard);
    }
    const auto it = shards[shard].find(name);
    if (it == shards[shard].end()) {
      throw Error(
          fmt::format("{}/{}: no tensor '{}', which model.safetensors.index.json maps there", dir,
                      shard, name));
    }
    out.emplace(name, it->second);
  }
  return out;
}

}  // namespace

HfWeights HfWeights::open(const std::string& dir) {
  HfWeights w;
  if (fs::exists(dir + "/model.safetensors")) {
    w.tensors_ = read_file(dir + "/model.safetensors");
  } else if (fs::exists(dir + "/model.safetensors.index.json")) {
    w.tensors_ = read_index(dir);
  } else {
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir));
  }
  return w;
}

const HfWeights::Tensor& HfWeights::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(fmt::format("no tensor '{}'", name));
  return it->second;
}

const std::vector<int64_t>& HfWeights::shape(const std::string& name) const {
  return at(name).shape;
}

const std::string& HfWeights::file(const std::string& name) const {
  return at(name).file->path;
}

std::vector<float> HfWeights::read_f32(const std::string& name) const {
  const Tensor& t = at(name);
  const std::string& path = t.file->path;
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
    throw Error(fmt::format("{}: tensor '{}' has dtype {}; fp8lm reads F32, F16 and BF16", path,
                            name, t.dtype));
  }
  const std::vector<uint8_t> bytes =
      read_range(path, t.file->data_offset + t.begin, t.end - t.begin);
  if (!t.file->checksums.empty()) {
    const auto sum = t.file->checksums.find(name);
    if (sum == t.file->checksums.end())
      throw Error(fmt::format("{}: tensor '{}' has no checksum", path, name));
    if (fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size())) != sum->second) {
      throw Error(fmt::format("{}: tensor '{}' does not match its checksum: the file is damaged",
                              path, name));
    }
  }
  const size_t n = bytes.size() / value_bytes(t.dtype);
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    if (n) std::memcpy(out.data(), bytes.data(), n * 4);
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = t.dtype == "F16" ? fp16_to_float(h) : bf16_to_float(h);
  }
  return out;
}

}  // namespace fp8lm
