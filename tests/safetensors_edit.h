#pragma once
// Editing safetensors files byte by byte, for tests that damage or alter them the way a disk,
// another tool or a user might.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/safetensors.h"

namespace fp8lm::test {

inline std::string header_of(const std::vector<uint8_t>& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
}

inline void set_header(std::vector<uint8_t>& bytes, std::string header) {
  const auto data = std::vector<uint8_t>(
      bytes.begin() + 8 + static_cast<long>(header_of(bytes).size()), bytes.end());
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = header.size();
  bytes.assign(8, 0);
  std::memcpy(bytes.data(), &n, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
}

inline void replace_in_header(std::vector<uint8_t>& bytes, const std::string& from,
                              const std::string& to) {
  std::string h = header_of(bytes);
  const size_t at = h.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  h.replace(at, from.size(), to);
  set_header(bytes, h);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// The header's own checksum made right again after an edit: the file as if fp8lm had written
// it so (a bug's output, or a deliberate forgery), to test what is checked beyond checksums.
inline void reseal(std::vector<uint8_t>& bytes) {
  nlohmann::json h = nlohmann::json::parse(header_of(bytes));
  nlohmann::json sums = nlohmann::json::parse(h["__metadata__"]["xxh3_64"].get<std::string>());
  sums["__header__"] = header_checksum(h);
  h["__metadata__"]["xxh3_64"] = sums.dump();
  set_header(bytes, h.dump());
}

enum class Seal { Keep, Break };

// Sets (or, with nullopt, removes) a metadata key of a safetensors file in place; Seal::Keep
// makes the header's checksum match the edit, Seal::Break leaves it as an editor would.
inline void set_metadata(const std::string& path, const std::string& key,
                         const std::optional<std::string>& value, Seal seal = Seal::Keep) {
  std::vector<uint8_t> bytes = read_bytes(path);
  nlohmann::json h = nlohmann::json::parse(header_of(bytes));
  if (value) {
    h["__metadata__"][key] = *value;
  } else {
    h["__metadata__"].erase(key);
  }
  set_header(bytes, h.dump());
  if (seal == Seal::Keep && h["__metadata__"].contains("xxh3_64")) reseal(bytes);
  write_bytes(path, bytes);
}

// A file as another tool (or an fp8lm before checksums) writes it: no checksums, no format
// version.
inline void without_checksums(std::vector<uint8_t>& bytes) {
  nlohmann::json h = nlohmann::json::parse(header_of(bytes));
  h["__metadata__"].erase("xxh3_64");
  h["__metadata__"].erase("fp8lm_format_version");
  set_header(bytes, h.dump());
}

// A file as an fp8lm before issue 30 wrote it: tensor checksums only, no format version.
inline void as_format_version_1(std::vector<uint8_t>& bytes) {
  nlohmann::json h = nlohmann::json::parse(header_of(bytes));
  nlohmann::json sums = nlohmann::json::parse(h["__metadata__"]["xxh3_64"].get<std::string>());
  sums.erase("__header__");
  h["__metadata__"]["xxh3_64"] = sums.dump();
  h["__metadata__"].erase("fp8lm_format_version");
  set_header(bytes, h.dump());
}

// Byte offset in the file of tensor `name`'s data.
inline uint64_t data_offset(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string header = header_of(bytes);
  return 8 + header.size() + nlohmann::json::parse(header)[name]["data_offsets"][0].get<uint64_t>();
}

}  // namespace fp8lm::test
