// SafetensorsWriter (io/safetensors.h): each tensor streamed from its source to the file with
// its checksum, the header written first with placeholders and again in place at the end.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>

#include <xxhash.h>

#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_integrity.h"

namespace fp8lm {
namespace {

// A tensor from this size on is written after all the smaller ones.
constexpr uint64_t kLarge = uint64_t{1} << 20;

}  // namespace

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
  // Small tensors (biases, norms, FP8 scaling state) first, together, then the large ones: a
  // reader that takes the large tensors front to back then reads each small one from a few
  // pages it already has, not by a seek between two large ones.
  std::vector<std::pair<std::string, const Entry*>> layout;
  for (const auto& [name, e] : entries_) layout.emplace_back(name, &e);
  std::ranges::stable_sort(layout, {}, [](const auto& ne) { return ne.second->bytes() >= kLarge; });
  // The header goes first but the checksums are known only after the data: it is written with
  // placeholders of the same width, then written again in place.
  const auto header_text = [&](const std::map<std::string, std::string>& sums) {
    nlohmann::json header = nlohmann::json::object();
    uint64_t offset = 0;
    for (const auto& [name, e] : layout) {
      const uint64_t size = e->bytes();
      header[name] = {{"dtype", dtype_name(e->dtype)},
                      {"shape", e->shape},
                      {"data_offsets", {offset, offset + size}}};
      offset += size;
    }
    nlohmann::json meta(metadata_);
    meta[kFormatVersionKey] = std::to_string(kFormatVersion);
    meta.erase(kChecksumKey);
    header["__metadata__"] = meta;
    std::map<std::string, std::string> all = sums;
    all[kHeaderEntry] = header_checksum(header);
    header["__metadata__"][kChecksumKey] = nlohmann::json(all).dump();
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
  for (const auto& [name, e] : layout) {
    const uint64_t expected = e->bytes();
    uint64_t written = 0;
    XXH3_64bits_reset(state.get());
    e->source([&](std::span<const uint8_t> bytes) {
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

}  // namespace fp8lm
