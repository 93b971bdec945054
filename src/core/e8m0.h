#pragma once
// OCP MX v1.0's E8M0 scale format: 8 exponent bits, no sign, no mantissa, bias 127; code c is
// 2^(c - 127) (2^-127 to 2^127), 0xFF is NaN, there is no zero. MXFP8 keeps one per 32 values.
#include <bit>
#include <cstdint>
#include <limits>

namespace fp8lm {

inline constexpr uint8_t kE8M0Nan = 0xff;

// 2^(code - 127) exactly (2^-127 is a float subnormal); NaN for 0xFF. Built from the bits: a
// quantizer calls it once per block.
inline float e8m0_decode(uint8_t code) {
  if (code == kE8M0Nan) return std::numeric_limits<float>::quiet_NaN();
  return std::bit_cast<float>(code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23);
}

// TE's MX scale rule (transformer_engine/common/utils.cuh, float_to_e8m0, the software path
// beside Blackwell's cvt.rp.satfinite.ue8m0x2.f32): the smallest power of two at or above x,
// so that the block's largest value never overflows after scaling (arXiv 2506.08027: rounding
// down, as the OCP spec suggests, can overflow it). NaN gives 0xFF, +Inf 0xFE (2^127, satfinite),
// 0 gives 0x00; a value above 2^127 gives 0xFE; a subnormal float at or below 2^-127 gives 0x00
// and one above it 0x01. x is an amax divided by the element format's max: negative inputs are
// not scales and give NaN.
uint8_t e8m0_encode_round_up(float x);

// The same rule over doubles, plainly: the oracle the bit-level encoder is tested against.
uint8_t e8m0_encode_round_up_reference(double x);

// TE's reciprocal of a scale (utils.cuh, exp2f_rcp): 2^(127 - code), except code 0 (an all-zero
// block's scale) whose reciprocal is taken as 1, so that the block's zeros stay zeros without a
// 2^127 multiplier. What the MX quantizer multiplies each value by.
inline float e8m0_reciprocal(uint8_t code) {
  if (code == 0) return 1.0f;
  if (code == kE8M0Nan) return std::numeric_limits<float>::quiet_NaN();
  // 2^(127 - code): a normal float's exponent field 254 - code, down to code 253 (2^-126); code
  // 254's 2^-127 is a subnormal.
  return std::bit_cast<float>(code < 254 ? static_cast<uint32_t>(254 - code) << 23 : 0x00400000u);
}

}  // namespace fp8lm
