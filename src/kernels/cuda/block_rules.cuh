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
  const uint32_t u = float_bits(x);
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
  return e > -127 ? bits_float(static_cast<uint32_t>(e + 127) << 23) : bits_float(0x00400000u);
}

// e8m0_decode and e8m0_reciprocal (code 0's reciprocal is 1).
__host__ __device__ inline float e8m0_value(uint8_t code) {
  return code == 0xff ? bits_float(0x7fc00000u) : exp2_exact(static_cast<int>(code) - 127);
}
__host__ __device__ inline float e8m0_rcp(uint8_t code) {
  if (code == 0) return 1.0f;
  return code == 0xff ? bits_float(0x7fc00000u) : exp2_exact(127 - static_cast<int>(code));
}

// fp8_block_scale (TE's compute_scale_from_amax): fp8_max / amax, FLT_MAX on overflow, 1 for a
// zero, Inf or NaN amax, the mantissa cleared for power-of-two scales.
__host__ __device__ inline float block_scale(float amax, float fp8_max, bool power_2_scale,
                                             float amax_epsilon) {
  if (amax < amax_epsilon) amax = amax_epsilon;
  const uint32_t a = float_bits(amax) & 0x7fffffffu;
  if (a == 0 || a >= 0x7f800000u) return 1.0f;
  float scale = fp8_max / amax;
  if ((float_bits(scale) & 0x7fffffffu) == 0x7f800000u) scale = bits_float(0x7f7fffffu);
  if (power_2_scale) scale = bits_float(float_bits(scale) & 0xff800000u);
  return scale;
}

// The decoded value of an FP8 code as the CPU's table holds it, as BF16 bits after a multiply
// by a power of two (exact): NaN codes give the table's NaN (quiet, with the code's sign)
// without going through a multiply, whose NaN a GPU would make canonical.
template <Fp8Format F>
__host__ __device__ inline uint16_t fp8_times_pow2_bf16(uint8_t code, float pow2) {
  constexpr int man = F == Fp8Format::E4M3 ? 3 : 2, bias = F == Fp8Format::E4M3 ? 7 : 15;
  const uint32_t sign = code >> 7, e = (code & 0x7fu) >> man, m = code & ((1u << man) - 1);
  const bool nan = F == Fp8Format::E4M3 ? (e == 15 && m == 7) : (e == 31 && m != 0);
  if (nan) return static_cast<uint16_t>(sign << 15 | 0x7fc0u);
  float v;
  if (F == Fp8Format::E5M2 && e == 31) {
    v = bits_float(0x7f800000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * exp2_exact(1 - bias - man);
  } else {
    v = bits_float((e - bias + 127) << 23 | m << (23 - man));
  }
  if (sign) v = -v;
  return bf16_round(v * pow2);
}

}  // namespace fp8lm::cuda
