#pragma once
// The CPU codecs on the device, bit for bit, and the only copy of them there: FP8 encode
// (fp8_encode of core/fp8_dtype.h in its saturating mode, with its saturated / flushed flags),
// BF16 rounding (core/bf16.h), and what every FP8 producer shares: the statistics
// of CastStats (fp8/quantize.h), gathered per thread and committed with one atomic per block.
// The encoder is integer arithmetic on fp8_consts, not the PTX conversion behind
// __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...): that one turns every NaN into 0x7f (sign
// dropped; the CPU keeps it and gives 0x7e in E5M2), and the flags need the unbounded code.
//
// The codecs are __host__ __device__ so that a host program can hold them against the CPU
// codecs over every float; everything else here is device-only. Device code calls the
// constexpr fp8_consts, so .cu files including this need --expt-relaxed-constexpr.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/fp8_dtype.h"
#include "kernels/op_math.h"

#ifdef __CUDACC__
#include "kernels/cuda/reduce.cuh"
#endif

namespace fp8lm::cuda {

struct Fp8Code {
  uint8_t code;
  bool saturated;  // |x| rounded past the format's max, or was ±Inf (the code is then ±max)
  bool flushed;    // x was non-zero and became ±0
};

// fp8_encode<F>(x, /*saturate=*/true, ...) step for step: NaN keeps its sign, ties go to even.
template <DType F>
__host__ __device__ inline Fp8Code fp8_encode_sat(float x) {
  constexpr Fp8Consts c = fp8_consts(F);
  const uint32_t u = op_math::bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return {static_cast<uint8_t>(sign | c.nan_code), false, false};
  uint32_t code;
  bool flushed = false;
  if (a < c.min_normal_bits) {
    // The magic number's ulp is the subnormal spacing, so the rounded sum counts spacings. An
    // explicit round-to-nearest add: the compiler may not fold or reassociate it.
#ifdef __CUDA_ARCH__
    const float sum = __fadd_rn(op_math::from_bits(a), c.subnormal_magic);
#else
    const float sum = op_math::from_bits(a) + c.subnormal_magic;
#endif
    code = op_math::bits(sum) - c.magic_bits;
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

// bf16_from_float: round to nearest even, NaN stays a quiet NaN with its sign.
__host__ __device__ inline uint16_t bf16_round(float x) {
  uint32_t u = op_math::bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

#ifdef __CUDACC__

// *amax = max(*amax, v) for v >= +0, not NaN: floats with a clear sign bit order like their bit
// patterns read as unsigned integers. A NaN already in *amax (of either sign) stays, as the
// CPU's max_keeping_nan keeps it; a negative *amax (which no scaling state holds) would too.
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

// q = cast(y * scale), and y's share of the statistics (quantize's scalar loop, one element;
// the product rounded once, as on the CPU).
template <DType F>
__device__ inline uint8_t fp8_encode_counted(float y, float scale, Fp8Stats& stats) {
  const Fp8Code c = fp8_encode_sat<F>(__fmul_rn(y, scale));
  stats.amax = fmaxf(stats.amax, fabsf(y));  // fmaxf returns the other operand for a NaN
  stats.saturated += c.saturated;
  stats.flushed += c.flushed;
  return c.code;
}

// Adds the block's statistics to *amax, *saturated and *flushed, with one atomic each from one
// thread, skipping the null pointers and what would change nothing. Every thread of the block
// must call it (it synchronizes the block); the block may have any shape of a multiple of 32
// threads, and may call it again (one piece of work after another). Max and integer sums
// combine exactly, so the result does not depend on the order.
__device__ inline void commit_fp8_stats(const Fp8Stats& stats, float* amax,
                                        unsigned long long* saturated,
                                        unsigned long long* flushed) {
  __shared__ float warp_amax[32];
  __shared__ unsigned long long warp_saturated[32];
  __shared__ unsigned long long warp_flushed[32];
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = tid % 32, warp = tid / 32;
  const float m = warp_reduce(stats.amax, Fmax{});
  const auto s = warp_reduce(static_cast<unsigned long long>(stats.saturated), Sum{});
  const auto f = warp_reduce(static_cast<unsigned long long>(stats.flushed), Sum{});
  if (lane == 0) {
    warp_amax[warp] = m;
    warp_saturated[warp] = s;
    warp_flushed[warp] = f;
  }
  __syncthreads();
  if (tid == 0) {
    const unsigned warps = blockDim.x * blockDim.y * blockDim.z / 32;
    float total_amax = 0.0f;
    unsigned long long total_saturated = 0, total_flushed = 0;
    for (unsigned w = 0; w < warps; ++w) {
      total_amax = fmaxf(total_amax, warp_amax[w]);
      total_saturated += warp_saturated[w];
      total_flushed += warp_flushed[w];
    }
    if (amax && total_amax > 0.0f) atomic_max_nonneg(amax, total_amax);
    if (saturated && total_saturated) atomicAdd(saturated, total_saturated);
    if (flushed && total_flushed) atomicAdd(flushed, total_flushed);
  }
  __syncthreads();  // a later call may overwrite the warps' parts
}

#endif  // __CUDACC__

}  // namespace fp8lm::cuda
