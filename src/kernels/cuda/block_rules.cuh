#pragma once
// The block-scaled recipes' scale rules on the device, bit for bit with the CPU's (core/e8m0,
// fp8/fp8_block_quantize.cpp): TE's E8M0 round-up scale and its reciprocal, Float8BlockScaling's
// FP32 scale, and the FP8 decode a BF16 operand is expanded from. __host__ __device__ so that a
// host test holds them against the CPU functions (tests/test_cuda_block_cast.cpp); integer bit
// arithmetic, so no device math library rounding differs from the host's.
#include <cstdint>

#include "core/fp8_dtype.h"
#include "kernels/cuda/fp8_codec.cuh"

namespace fp8lm::cuda {

// core/e8m0.h's e8m0_encode_round_up.
__host__ __device__ inline uint8_t e8m0_round_up(float x) {
  const uint32_t u = op_math::bits(x);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u || (u >> 31 && a != 0)) return 0xff;  // NaN, or a negative scale
  if (a == 0x7f800000u) return 0xfe;
  if (a == 0) return 0x00;
  uint32_t exponent = a >> 23;
  const uint32_t mantissa = a & 0x7fffffu;
  if (exponent == 0) return mantissa <= 0x400000u ? 0x00 : 0x01;
  if (mantissa != 0 && exponent != 0xfe) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// 2^e for e in [-127, 127] exactly (2^-127 is subnormal).
__host__ __device__ inline float exp2_exact(int e) {
  return e > -127 ? op_math::from_bits(static_cast<uint32_t>(e + 127) << 23)
                  : op_math::from_bits(0x00400000u);
}

// e8m0_decode and e8m0_reciprocal (code 0's reciprocal is 1).
__host__ __device__ inline float e8m0_value(uint8_t code) {
  return code == 0xff ? op_math::from_bits(0x7fc00000u) : exp2_exact(static_cast<int>(code) - 127);
}
__host__ __device__ inline float e8m0_rcp(uint8_t code) {
  if (code == 0) return 1.0f;
  return code == 0xff ? op_math::from_bits(0x7fc00000u) : exp2_exact(127 - static_cast<int>(code));
}

// fp8_block_scale (TE's compute_scale_from_amax): fp8_max / amax, FLT_MAX on overflow, 1 for a
// zero, Inf or NaN amax, the mantissa cleared for power-of-two scales.
__host__ __device__ inline float block_scale(float amax, float fp8_max, bool power_2_scale,
                                             float amax_epsilon) {
  if (amax < amax_epsilon) amax = amax_epsilon;
  const uint32_t a = op_math::bits(amax) & 0x7fffffffu;
  if (a == 0 || a >= 0x7f800000u) return 1.0f;
  float scale = fp8_max / amax;
  if ((op_math::bits(scale) & 0x7fffffffu) == 0x7f800000u) scale = op_math::from_bits(0x7f7fffffu);
  if (power_2_scale) scale = op_math::from_bits(op_math::bits(scale) & 0xff800000u);
  return scale;
}

template <DType F>
__host__ __device__ inline bool fp8_is_nan(uint8_t code) {
  return F == DType::E4M3 ? (code & 0x7fu) == 0x7fu : (code & 0x7fu) > 0x7cu;
}

// The decoded value of a finite or infinite FP8 code, exactly (fp8_decode_table's).
template <DType F>
__host__ __device__ inline float fp8_value(uint8_t code) {
  constexpr int man = F == DType::E4M3 ? 3 : 2, bias = F == DType::E4M3 ? 7 : 15;
  const uint32_t sign = code >> 7, e = (code & 0x7fu) >> man, m = code & ((1u << man) - 1);
  float v;
  if (F == DType::E5M2 && e == 31) {
    v = op_math::from_bits(0x7f800000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * exp2_exact(1 - bias - man);
  } else {
    v = op_math::from_bits((e - bias + 127) << 23 | m << (23 - man));
  }
  return sign ? -v : v;
}

// The decoded value of an FP8 code as the CPU's table holds it, as BF16 bits after a multiply
// by a power of two (exact): NaN codes give the table's NaN (quiet, with the code's sign)
// without going through a multiply, whose NaN a GPU would make canonical.
template <DType F>
__host__ __device__ inline uint16_t fp8_times_pow2_bf16(uint8_t code, float pow2) {
  if (fp8_is_nan<F>(code)) return static_cast<uint16_t>((code >> 7) << 15 | 0x7fc0u);
  return bf16_round(fp8_value<F>(code) * pow2);
}

// NVFP4 (fp8/nvfp4_quantize.cpp, core/e2m1.h). The E2M1 codes' values.
__host__ __device__ inline float e2m1_value(uint8_t code) {
  constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[code & 7u];
  return code & 8u ? -v : v;
}

// e2m1_encode: the number of rounding boundaries at or below the magnitude, NaN to 7.
__host__ __device__ inline uint8_t e2m1_nearest(float x) {
  const uint32_t u = op_math::bits(x);
  const float a = op_math::from_bits(u & 0x7fffffffu);
  int m = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
          (a > 5.0f);
  if ((u & 0x7fffffffu) > 0x7f800000u) m = 7;
  return static_cast<uint8_t>((u >> 31 ? 8u : 0u) | static_cast<uint32_t>(m));
}

// e2m1_encode_stochastic: up from the truncated code t with probability (a - lo) / step, from
// the top 24 of 32 random bits. A subtract then a multiply: nothing the compiler could fuse.
__host__ __device__ inline uint8_t e2m1_stochastic(float x, uint32_t bits) {
  constexpr float kLow[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  constexpr float kInverseStep[8] = {2.0f, 2.0f, 2.0f, 2.0f, 1.0f, 1.0f, 0.5f, 1.0f};
  const uint32_t u = op_math::bits(x);
  const float a = op_math::from_bits(u & 0x7fffffffu);
  const int t = (a >= 0.5f) + (a >= 1.0f) + (a >= 1.5f) + (a >= 2.0f) + (a >= 3.0f) + (a >= 4.0f) +
                (a >= 6.0f);
  const float p = (a - kLow[t]) * kInverseStep[t];
  const float draw = static_cast<float>(bits >> 8) * 0x1p-24f;
  int m = t + (draw < p);
  if (m > 7 || (u & 0x7fffffffu) > 0x7f800000u) m = 7;
  return static_cast<uint8_t>((u >> 31 ? 8u : 0u) | static_cast<uint32_t>(m));
}

// nvfp4_global_encode_scale: E4M3 max x E2M1 max over the tensor's amax, at most FLT_MAX, and
// 1 for a zero amax or a zero scale.
__host__ __device__ inline float nvfp4_global_encode(float amax) {
  float s = 2688.0f / amax;  // 448 * 6
  if (!(s < 0x1.fffffep127f)) s = 0x1.fffffep127f;
  return amax == 0.0f || s == 0.0f ? 1.0f : s;
}

}  // namespace fp8lm::cuda
