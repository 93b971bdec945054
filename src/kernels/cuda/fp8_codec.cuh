#pragma once
// The CPU codecs on the device, bit for bit: FP8 encode (fp8_encode of core/fp8_dtype.h in its
// saturating mode, with its saturated / flushed flags) and decode, BF16 rounding (core/bf16.h),
// and what every FP8 producer shares: the statistics of CastStats (fp8/quantize.h), gathered per
// thread and committed with one atomic per block.
//
// The codecs are __host__ __device__ so that a host program can hold them against the CPU
// codecs over every float; everything else here is device-only.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/fp8_dtype.h"
#include "kernels/cuda/fp8_tensor.h"

namespace fp8lm::cuda {

__host__ __device__ inline uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

__host__ __device__ inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

struct Fp8Code {
  uint8_t code;
  bool saturated;  // |x| rounded past the format's max, or was ±Inf (the code is then ±max)
  bool flushed;    // x was non-zero and became ±0
};

// fp8_encode<F>(x, /*saturate=*/true, ...) step for step: NaN keeps its sign, ties go to even.
template <Fp8Format F>
__host__ __device__ inline Fp8Code fp8_encode_sat(float x) {
  constexpr Fp8Consts c = fp8_consts(F);
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return {static_cast<uint8_t>(sign | c.nan_code), false, false};
  uint32_t code;
  bool flushed = false;
  if (a < c.min_normal_bits) {
    // The magic number's ulp is the subnormal spacing, so the rounded sum counts spacings. An
    // explicit round-to-nearest add: the compiler may not fold or reassociate it.
#ifdef __CUDA_ARCH__
    const float sum = __fadd_rn(bits_float(a), c.subnormal_magic);
#else
    const float sum = bits_float(a) + c.subnormal_magic;
#endif
    code = float_bits(sum) - c.magic_bits;
    flushed = a != 0 && code == 0;
  } else {
    // Rebias, drop the low mantissa bits with ties to even; a carry bumps the exponent, and
    // anything past max (Inf included) lands above max_code.
    const uint32_t half_minus_one = (1u << (c.man_shift - 1)) - 1;
    code = (a - c.rebias + half_minus_one + ((a >> c.man_shift) & 1u)) >> c.man_shift;
  }
  const bool saturated = code > c.max_code;
  if (saturated) code = c.max_code;
  return {static_cast<uint8_t>(sign | code), saturated, flushed};
}

// Exact decode (fp8_decode): NaN codes give a quiet NaN with the code's sign, E5M2's Inf codes
// give ±Inf.
template <Fp8Format F>
__host__ __device__ inline float fp8_decode_value(uint8_t code) {
  constexpr bool kE4M3 = F == Fp8Format::E4M3;
  constexpr uint32_t kMan = kE4M3 ? 3 : 2;
  constexpr uint32_t kBias = kE4M3 ? 7 : 15;
  constexpr float kMinSubnormal = kE4M3 ? 0x1p-9f : 0x1p-16f;
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t mag = code & 0x7fu;
  const uint32_t exp = mag >> kMan;
  const uint32_t man = mag & ((1u << kMan) - 1);
  if (kE4M3 ? mag == 0x7fu : exp == 31u) {
    return bits_float(sign | (!kE4M3 && man == 0 ? 0x7f800000u : 0x7fc00000u));
  }
  // man * 2^-9 (2^-16) is exact: a small integer times a power of two.
  if (exp == 0) return bits_float(sign | float_bits(static_cast<float>(man) * kMinSubnormal));
  return bits_float(sign | ((exp + 127u - kBias) << 23) | (man << (23u - kMan)));
}

// bf16_from_float: round to nearest even, NaN stays a quiet NaN with its sign.
__host__ __device__ inline uint16_t bf16_round(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

#ifdef __CUDACC__

// *amax = max(*amax, v) for v >= 0 and *amax >= 0 (neither NaN): non-negative floats order like
// their bit patterns read as unsigned integers.
__device__ inline void atomic_max_nonneg(float* amax, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(v));
}

// What one thread's casts lost, as CastStats: amax of the unscaled values (NaN ignored, Inf
// counted), and how many saturated and flushed.
struct Fp8Stats {
  float amax = 0.0f;
  unsigned saturated = 0;
  unsigned flushed = 0;
};

// q = cast(y * scale), and y's share of the statistics (quantize's scalar loop, one element).
template <Fp8Format F>
__device__ inline uint8_t fp8_encode_counted(float y, float scale, Fp8Stats& stats) {
  const Fp8Code c = fp8_encode_sat<F>(__fmul_rn(y, scale));
  stats.amax = fmaxf(stats.amax, fabsf(y));  // fmaxf returns the other operand for a NaN
  stats.saturated += c.saturated;
  stats.flushed += c.flushed;
  return c.code;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Adds a block's statistics to q's amax and counters, with one atomic each. Every thread of
// the block must call it (it synchronizes the block), once, with a 1-D block whose size is a
// multiple of 32. Max and integer sums combine exactly, so the result has no order.
__device__ inline void commit_fp8_stats(const Fp8Out& q, const Fp8Stats& stats) {
  __shared__ float block_amax[32];
  __shared__ unsigned long long block_saturated[32];
  __shared__ unsigned long long block_flushed[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const float amax = warp_max(stats.amax);
  const unsigned long long saturated = warp_sum(stats.saturated);
  const unsigned long long flushed = warp_sum(stats.flushed);
  if (lane == 0) {
    block_amax[warp] = amax;
    block_saturated[warp] = saturated;
    block_flushed[warp] = flushed;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float total_amax = 0.0f;
  unsigned long long total_saturated = 0, total_flushed = 0;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) {
    total_amax = fmaxf(total_amax, block_amax[w]);
    total_saturated += block_saturated[w];
    total_flushed += block_flushed[w];
  }
  if (q.amax) atomic_max_nonneg(q.amax, total_amax);
  if (q.saturated && total_saturated) atomicAdd(q.saturated, total_saturated);
  if (q.flushed && total_flushed) atomicAdd(q.flushed, total_flushed);
}

#endif  // __CUDACC__

}  // namespace fp8lm::cuda
