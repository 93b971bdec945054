#pragma once
// TFRecord framing, the container of TensorBoard's event files: each record is its length
// (uint64, little-endian), the masked CRC-32C of those eight bytes, the data, and the masked
// CRC-32C of the data.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8lm {

// CRC-32C (Castagnoli: the reflected polynomial 0x82F63B78), as TFRecord checks its records.
uint32_t crc32c(std::string_view bytes);
// TFRecord's masked form: the CRC rotated right by 15 bits plus a constant, so that a CRC of
// data that holds CRCs is not itself trivially related to them.
uint32_t masked_crc32c(std::string_view bytes);

// data framed as one record.
std::string tfrecord(std::string_view data);

}  // namespace fp8lm
