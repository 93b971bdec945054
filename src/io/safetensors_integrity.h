#pragma once
// The checksums of a safetensors file (io/safetensors.h): the metadata key "xxh3_64" lists
// every tensor's XXH3-64 and, under "__header__", the header's own, so that neither the data
// nor what the metadata says of it changes unseen.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace fp8lm {

// The metadata key of the file format's version, and the version this build writes. A file
// without the key is of version 1 (written before the header was checksummed).
inline constexpr const char* kFormatVersionKey = "fp8lm_format_version";
inline constexpr int kFormatVersion = 2;

// What a file's checksums cover.
enum class Integrity {
  Sealed,       // the header and every tensor (version 2)
  TensorsOnly,  // every tensor but not the metadata (version 1: fp8lm before issue 30)
  None,         // nothing (an fp8lm older still, or another tool)
};
// Of a file's metadata as the reader returned it (the reader has verified what it claims).
Integrity metadata_integrity(const std::map<std::string, std::string>& metadata);

// The XXH3-64 (hex) of a safetensors header: every tensor entry and every metadata entry but
// the checksum list itself, in name order.
std::string header_checksum(const nlohmann::json& header);

// The metadata key of the checksum list, and its entry for the header itself (no tensor has a
// name starting "__").
inline constexpr const char* kChecksumKey = "xxh3_64";
inline constexpr const char* kHeaderEntry = "__header__";

// 16 lowercase hex digits, as the checksum list writes a digest.
std::string hex64(uint64_t v);

// The checksum list of a header, by tensor, once the header's own entry in it is verified
// (Error naming origin otherwise). A file of format version 2 must have both; older files and
// other tools' may have neither (an empty list) or the tensors' only.
std::map<std::string, std::string> checked_checksums(const nlohmann::json& header,
                                                     const std::map<std::string, std::string>& meta,
                                                     const std::string& origin);

}  // namespace fp8lm
