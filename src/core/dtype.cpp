#include "core/dtype.h"

#include <cctype>
#include <iterator>
#include <string>

namespace fp8lm {
namespace {

// Every dtype once, in the enum's order: safetensors' name, the lowercase name flags and
// messages use, and the bytes one element takes in memory and in files.
struct DTypeRow {
  DType d;
  std::string_view name, short_name;
  size_t bytes;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F32, "F32", "fp32", 4},      {DType::BF16, "BF16", "bf16", 2},
    {DType::E4M3, "F8_E4M3", "e4m3", 1}, {DType::E5M2, "F8_E5M2", "e5m2", 1},
    {DType::I64, "I64", "i64", 8},       {DType::U8, "U8", "u8", 1},
    {DType::F16, "F16", "fp16", 2},      {DType::E2M1, "E2M1", "e2m1", 1},
    {DType::E8M0, "E8M0", "e8m0", 1},
};

const DTypeRow& row(DType d) {
  static_assert(std::size(kDTypes) == static_cast<size_t>(DType::E8M0) + 1);
  const auto i = static_cast<size_t>(d);
  static constexpr DTypeRow kUnknown{DType::U8, "?", "?", 1};
  return i < std::size(kDTypes) ? kDTypes[i] : kUnknown;
}

}  // namespace

std::string_view dtype_name(DType d) {
  return row(d).name;
}

std::string_view dtype_short_name(DType d) {
  return row(d).short_name;
}

size_t dtype_size(DType d) {
  return row(d).bytes;
}

std::optional<DType> parse_dtype(std::string_view short_name) {
  std::string lower(short_name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const DTypeRow& r : kDTypes)
    if (r.short_name == lower) return r.d;
  return std::nullopt;
}

}  // namespace fp8lm
