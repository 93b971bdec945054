#pragma once
// OCP MX v1.0's E8M0 scale format: 8 exponent bits, no sign, no mantissa, bias 127; code c is
// 2^(c - 127) (2^-127 to 2^127), 0xFF is NaN, there is no zero. MXFP8 keeps one per 32 values.
#include <cstdint>

#include "core/op_math.h"

namespace fp8lm {

inline constexpr uint8_t kE8M0Nan = 0xff;

// 2^(code - 127) exactly (2^-127 is a float subnormal); NaN for 0xFF. Built from the bits: a
// quantizer calls it once per block.
FP8LM_OP float e8m0_decode(uint8_t code) {
  if (code == kE8M0Nan) return op_math::from_bits(0x7fc00000u);
  return op_math::from_bits(code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23);
}

// TE's MX scale rule (transformer_engine/common/utils.cuh, float_to_e8m0, the software path
// beside Blackwell's cvt.rp.satfinite.ue8m0x2.f32): the smallest power of two at or above x,
// so that the block's largest value never overflows after scaling (arXiv 2506.08027: rounding
// down, as the OCP spec suggests, can overflow it). NaN gives 0xFF, +Inf 0xFE (2^127, satfinite),
// 0 gives 0x00; a value above 2^127 gives 0xFE; a subnormal float at or below 2^-127 gives 0x00
// and one above it 0x01. x is an amax divided by the element format's max: negative inputs are
// not scales and give NaN.
FP8LM_OP uint8_t e8m0_encode_round_up(float x) {
  const uint32_t u = op_math::bits(x), a = u & 0x7fffffffu;
  if (a > 0x7f800000u || (u >> 31 && a != 0)) return kE8M0Nan;
  if (a == 0x7f800000u) return 0xfe;
  if (a == 0) return 0x00;
  uint32_t exponent = a >> 23;  // the biased exponent: the code of x's binade
  const uint32_t mantissa = a & 0x7fffffu;
  // A normal x above its binade's power of two rounds up to the next code, except at the top
  // (0xFE: 2^127 is the largest scale). A subnormal x has exponent field 0: at or below 2^-127
  // (mantissa 0x400000) it fits code 0, above it it rounds up to code 1 (2^-126).
  if (exponent == 0) return mantissa <= 0x400000u ? 0x00 : 0x01;
  if (mantissa != 0 && exponent != 0xfe) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// The same rule over doubles, plainly: the oracle the bit-level encoder is tested against.
uint8_t e8m0_encode_round_up_reference(double x);

// TE's reciprocal of a scale (utils.cuh, exp2f_rcp): 2^(127 - code), except code 0 (an all-zero
// block's scale) whose reciprocal is taken as 1, so that the block's zeros stay zeros without a
// 2^127 multiplier. What the MX quantizer multiplies each value by.
FP8LM_OP float e8m0_reciprocal(uint8_t code) {
  if (code == 0) return 1.0f;
  if (code == kE8M0Nan) return op_math::from_bits(0x7fc00000u);
  // 2^(127 - code): a normal float's exponent field 254 - code, down to code 253 (2^-126); code
  // 254's 2^-127 is a subnormal.
  return op_math::from_bits(code < 254 ? static_cast<uint32_t>(254 - code) << 23 : 0x00400000u);
}

}  // namespace fp8lm
