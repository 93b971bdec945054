#pragma once
// IEEE binary16. Encode rounds to nearest, ties to even, including into subnormals; values
// from 65520 (the midpoint above 65504) up overflow to Inf. NaN stays a quiet NaN with its sign.
#include <bit>
#include <cstdint>

namespace fp8lm {

using fp16_t = uint16_t;

inline fp16_t fp16_from_float(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<fp16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x47800000u)
    return static_cast<fp16_t>(sign | 0x7c00u);  // >= 65536 (and Inf): past every rounding
  if (a < 0x38800000u) {
    // Below 2^-14 the result is subnormal with spacing 2^-24. Adding 0.5 (whose float ulp is
    // 2^-24) makes the FPU round to that spacing, ties to even; the low bits are the code.
    const float sum = std::bit_cast<float>(a) + 0.5f;
    return static_cast<fp16_t>(sign | (std::bit_cast<uint32_t>(sum) - 0x3f000000u));
  }
  // Rebias the exponent (127 -> 15) and round away the 13 low mantissa bits, ties to even;
  // a mantissa carry bumps the exponent, reaching 0x7c00 (Inf) from 65520 up.
  const uint32_t rebiased = a - (112u << 23) + 0xfffu + ((a >> 13) & 1u);
  return static_cast<fp16_t>(sign | (rebiased >> 13));
}

inline float fp16_to_float(fp16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    // Subnormal (or zero): man * 2^-24 is exact in float.
    const float mag = static_cast<float>(man) * 0x1p-24f;
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

}  // namespace fp8lm
