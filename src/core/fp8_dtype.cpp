#include "core/fp8_dtype.h"

#include <cctype>
#include <string>

namespace fp8lm {

std::string_view fp8_format_name(Fp8Format f) {
  return f == Fp8Format::E4M3 ? "e4m3" : "e5m2";
}

std::optional<Fp8Format> parse_fp8_format(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "e4m3") return Fp8Format::E4M3;
  if (lower == "e5m2") return Fp8Format::E5M2;
  return std::nullopt;
}

namespace {
std::array<float, 256> make_table(const MinifloatSpec& spec) {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = static_cast<float>(minifloat_decode_reference(c, spec));
  return t;
}
}  // namespace

const std::array<float, 256>& fp8_decode_table(Fp8Format f) {
  static const std::array<float, 256> e4m3 = make_table(kE4M3Spec);
  static const std::array<float, 256> e5m2 = make_table(kE5M2Spec);
  return f == Fp8Format::E4M3 ? e4m3 : e5m2;
}

}  // namespace fp8lm
