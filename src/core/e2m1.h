#pragma once
// OCP MX v1.0's FP4 element format E2M1 (NVFP4's and MXFP4's values): a sign, 2 exponent bits
// (bias 1) and 1 mantissa bit, the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}, no Inf and no NaN.
// Encode rounds to nearest, ties to even, and always saturates (there is nothing to overflow
// to), as the GPUs' cvt.rn.satfinite.e2m1x2 does; a NaN input gives the largest magnitude with
// its sign: a NaN reaches a block-scaled tensor through its block's scale (the block amax is
// NaN). Codes are the low 4 bits of a byte; decode is exact. minifloat.h is their oracle.
#include <array>
#include <cstdint>

#include "core/op_math.h"

namespace fp8lm {

inline constexpr float kE2M1Max = 6.0f;

// The decoded value of each of the 16 codes.
inline constexpr std::array<float, 16> kE2M1Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                      4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                      -2.0f, -3.0f, -4.0f, -6.0f};

// The tables in the functions are local copies of the ones above: device code cannot index a
// namespace-scope array.
FP8LM_OP float e2m1_decode(uint8_t code) {
  constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitudes[code & 7u];
  return code & 8u ? -v : v;
}

// The magnitude's code is the number of rounding boundaries at or below it. Each boundary is
// the midpoint of two neighbouring values; a tie goes to the even code, so a boundary whose
// upper neighbour is even is reached by equality (>=) and one whose lower neighbour is even is
// passed only beyond it (>). Branch-free comparisons: the SIMD encoders count the same way.
FP8LM_OP uint8_t e2m1_encode(float x, bool* saturated = nullptr, bool* flushed = nullptr) {
  const uint32_t u = op_math::bits(x);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const float a = op_math::from_bits(u & 0x7fffffffu);
  uint8_t m = static_cast<uint8_t>(static_cast<int>(a > 0.25f) + static_cast<int>(a >= 0.75f) +
                                   static_cast<int>(a > 1.25f) + static_cast<int>(a >= 1.75f) +
                                   static_cast<int>(a > 2.5f) + static_cast<int>(a >= 3.5f) +
                                   static_cast<int>(a > 5.0f));
  if (nan) m = 7;
  // Saturated as the reference counts it: the magnitude rounded beyond 6 (to 8, from 7 on).
  if (saturated) *saturated = a >= 7.0f;
  if (flushed) *flushed = m == 0 && a != 0.0f;
  return static_cast<uint8_t>((u >> 31 ? 8u : 0u) | m);
}

// Stochastic rounding (NVFP4's gradients): a magnitude between neighbouring values lo < a < hi
// rounds up with probability (a - lo) / (hi - lo), so the rounding is unbiased in expectation.
// `bits` are 32 random bits, of which the top 24 make u in [0, 1); a rounds up when u < p.
// p is exact: a - lo is exact (lo = 0, or lo >= a / 2: Sterbenz) and the step is a power of
// two. Beyond 6 saturates; NaN gives the largest magnitude with its sign, as e2m1_encode.
// t, the code a truncates to, is the number of values above zero at or below a; the SIMD
// encoders count it the same way and look lo and 1 / step up by it.
inline constexpr std::array<float, 8> kE2M1InverseStep = {2.0f, 2.0f, 2.0f, 2.0f,
                                                          1.0f, 1.0f, 0.5f, 1.0f};

FP8LM_OP uint8_t e2m1_encode_stochastic(float x, uint32_t bits) {
  constexpr float kLow[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  constexpr float kInverseStep[8] = {2.0f, 2.0f, 2.0f, 2.0f, 1.0f, 1.0f, 0.5f, 1.0f};
  const uint32_t xb = op_math::bits(x);
  const float a = op_math::from_bits(xb & 0x7fffffffu);
  const int t = static_cast<int>(a >= 0.5f) + static_cast<int>(a >= 1.0f) +
                static_cast<int>(a >= 1.5f) + static_cast<int>(a >= 2.0f) +
                static_cast<int>(a >= 3.0f) + static_cast<int>(a >= 4.0f) +
                static_cast<int>(a >= 6.0f);
  // A subtract, then a multiply: nothing to fuse, on either side.
  const float p = op_math::mul(op_math::sub(a, kLow[t]), kInverseStep[t]);
  const float u = op_math::mul(static_cast<float>(bits >> 8), 0x1p-24f);
  int m = t + static_cast<int>(u < p);
  if (m > 7 || (xb & 0x7fffffffu) > 0x7f800000u) m = 7;
  return static_cast<uint8_t>((xb >> 31 ? 8u : 0u) | static_cast<unsigned>(m));
}

}  // namespace fp8lm
