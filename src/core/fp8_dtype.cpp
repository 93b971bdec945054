#include "core/fp8_dtype.h"

namespace fp8lm {

std::optional<DType> parse_fp8_format(std::string_view name) {
  const std::optional<DType> d = parse_dtype(name);
  if (d && is_fp8(*d)) return d;
  return std::nullopt;
}

namespace {
std::array<float, 256> make_table(const MinifloatSpec& spec) {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = static_cast<float>(minifloat_decode_reference(c, spec));
  return t;
}
}  // namespace

const std::array<float, 256>& fp8_decode_table(DType f) {
  static const std::array<float, 256> e4m3 = make_table(kE4M3Spec);
  static const std::array<float, 256> e5m2 = make_table(kE5M2Spec);
  return f == DType::E4M3 ? e4m3 : e5m2;
}

}  // namespace fp8lm
