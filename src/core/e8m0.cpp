#include "core/e8m0.h"

#include <bit>
#include <cmath>

namespace fp8lm {

uint8_t e8m0_encode_round_up(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x) || (u >> 31 && x != 0.0f)) return kE8M0Nan;
  if (std::isinf(x)) return 0xfe;
  if (x == 0.0f) return 0x00;
  uint32_t exponent = u >> 23;  // the biased exponent: the code of x's binade
  const uint32_t mantissa = u & 0x7fffffu;
  // A normal x above its binade's power of two rounds up to the next code, except at the top
  // (0xFE: 2^127 is the largest scale). A subnormal x has exponent field 0: at or below 2^-127
  // (mantissa 0x400000) it fits code 0, above it it rounds up to code 1 (2^-126).
  if (exponent == 0) return mantissa <= 0x400000u ? 0x00 : 0x01;
  if (mantissa != 0 && exponent != 0xfe) ++exponent;
  return static_cast<uint8_t>(exponent);
}

uint8_t e8m0_encode_round_up_reference(double x) {
  if (std::isnan(x) || x < 0.0) return kE8M0Nan;
  if (x == 0.0) return 0x00;
  // The smallest k with 2^k >= x, clamped to the codes' range [-127, 127].
  int k = std::ilogb(x);
  if (std::ldexp(1.0, k) < x) ++k;
  if (k < -127) k = -127;
  if (k > 127) k = 127;
  return static_cast<uint8_t>(k + 127);
}

}  // namespace fp8lm
