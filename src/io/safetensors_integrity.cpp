// The checksums of a safetensors file (io/safetensors_integrity.h).
#include "io/safetensors_integrity.h"

#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string_view>

#include <xxhash.h>

#include "core/json.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

// A length-prefixed string into a hash: no two sequences of strings feed the same bytes.
void feed(XXH3_state_t* state, std::string_view text) {
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  XXH3_64bits_update(state, length, sizeof length);
  XXH3_64bits_update(state, text.data(), text.size());
}

}  // namespace

std::string hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

std::map<std::string, std::string> checked_checksums(const nlohmann::json& header,
                                                     const std::map<std::string, std::string>& meta,
                                                     const std::string& origin) {
  const auto version = meta.find(kFormatVersionKey);
  const bool sealed = version != meta.end();
  if (sealed && version->second != std::to_string(kFormatVersion)) {
    const std::string& text = version->second;
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && end == text.data() + text.size() && v > kFormatVersion) {
      throw Error(
          fmt::format("{}: written by a newer fp8lm (file format version {}; this one "
                      "reads up to {})",
                      origin, v, kFormatVersion));
    }
    throw Error(fmt::format("{}: unknown file format version '{}'", origin, text.substr(0, 40)));
  }
  const auto it = meta.find(kChecksumKey);
  if (it == meta.end()) {
    if (sealed) {
      throw Error(
          fmt::format("{}: its checksum list (metadata '{}') is missing: the file was "
                      "changed after fp8lm wrote it",
                      origin, kChecksumKey));
    }
    return {};
  }
  const auto sums = parse_json(it->second, origin + ": " + std::string(kChecksumKey));
  const auto damaged = [&] {
    return Error(fmt::format("{}: its checksum list is damaged", origin));
  };
  if (!sums.is_object()) throw damaged();
  std::map<std::string, std::string> out;
  for (const auto& [name, sum] : sums.items()) {
    if (!sum.is_string()) throw damaged();
    out[name] = sum.get<std::string>();
  }
  const auto own = out.find(kHeaderEntry);
  if (own == out.end()) {
    if (sealed) {
      throw Error(
          fmt::format("{}: its checksum list has no entry for the header: the file was "
                      "changed after fp8lm wrote it",
                      origin));
    }
    return out;
  }
  if (own->second != header_checksum(header)) {
    throw Error(
        fmt::format("{}: its header (the metadata or the tensor table) does not match "
                    "its checksum: the file was changed after fp8lm wrote it",
                    origin));
  }
  out.erase(own);
  return out;
}

Integrity metadata_integrity(const std::map<std::string, std::string>& metadata) {
  if (metadata.count(kFormatVersionKey)) return Integrity::Sealed;
  return metadata.count(kChecksumKey) ? Integrity::TensorsOnly : Integrity::None;
}

std::string header_checksum(const nlohmann::json& header) {
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                       &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state.get());
  // An object's items come in key order.
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    feed(state.get(), name);
    feed(state.get(), entry.dump());
  }
  feed(state.get(), "__metadata__");
  if (header.contains("__metadata__") && header["__metadata__"].is_object()) {
    for (const auto& [key, value] : header["__metadata__"].items()) {
      if (key == kChecksumKey) continue;
      feed(state.get(), key);
      feed(state.get(), value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  return hex64(XXH3_64bits_digest(state.get()));
}

}  // namespace fp8lm
