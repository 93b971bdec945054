#pragma once
// The FP8 codec of core/fp8_dtype.h on the device, integer step for integer step and with the
// same constants (fp8_consts), so that every code equals the CPU's. The PTX conversion behind
// __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...) is not used: it turns every NaN into 0x7f
// (sign dropped; the CPU keeps the sign and gives 0x7e in E5M2), and below sm_89 it is a
// software emulation anyway. Also the per-block tally of what a cast lost (CastStats of
// fp8/quantize.h), published with one atomic per block.
//
// Include only from .cu files (needs --expt-relaxed-constexpr for fp8_consts).
#include <cstdint>

#include "core/fp8_dtype.h"

namespace fp8lm::cuda {

// fp8_encode<F>(x, saturate = true, &saturated, &flushed) of core/fp8_dtype.h.
template <Fp8Format F>
__device__ __forceinline__ uint8_t fp8_encode_device(float x, bool& saturated, bool& flushed) {
  constexpr Fp8Consts c = fp8_consts(F);
  const uint32_t u = __float_as_uint(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  saturated = false;
  flushed = false;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | c.nan_code);
  uint32_t code;
  if (a < c.min_normal_bits) {
    // Round-to-nearest-even of the addition does the rounding (see fp8_dtype.h); __fadd_rn
    // keeps the compiler from fusing or reordering it.
    code = __float_as_uint(__fadd_rn(__uint_as_float(a), c.subnormal_magic)) - c.magic_bits;
    flushed = a != 0 && code == 0;
  } else {
    const uint32_t half_minus_one = (1u << (c.man_shift - 1)) - 1;
    code = (a - c.rebias + half_minus_one + ((a >> c.man_shift) & 1u)) >> c.man_shift;
  }
  if (code > c.max_code) {
    saturated = true;
    code = c.max_code;
  }
  return static_cast<uint8_t>(sign | code);
}

// The exact value of a code (fp8_decode of core/fp8_dtype.h); NaN codes give a quiet NaN.
template <Fp8Format F>
__device__ __forceinline__ float fp8_decode_device(uint8_t code) {
  constexpr bool kE4M3 = F == Fp8Format::E4M3;
  constexpr uint32_t kManBits = kE4M3 ? 3 : 2;
  constexpr uint32_t kExpMask = kE4M3 ? 0xf : 0x1f;
  constexpr uint32_t kBias = kE4M3 ? 7 : 15;
  constexpr float kSubnormalUnit = kE4M3 ? 0x1p-9f : 0x1p-16f;
  const uint32_t e = (code >> kManBits) & kExpMask;
  const uint32_t m = code & ((1u << kManBits) - 1);
  float mag;
  if (e == 0) {
    mag = static_cast<float>(m) * kSubnormalUnit;  // exact: m < 8 times a power of two
  } else if (kE4M3 ? (e == 15 && m == 7) : (e == 31 && m != 0)) {
    mag = __uint_as_float(0x7fc00000u);
  } else if (!kE4M3 && e == 31) {
    mag = __uint_as_float(0x7f800000u);
  } else {
    mag = __uint_as_float(((e - kBias + 127u) << 23) | (m << (23 - kManBits)));
  }
  return (code & 0x80u) ? -mag : mag;
}

// What one thread's casts lost, summed over a block by publish_cast_tally.
struct CastTally {
  float amax = 0.0f;  // max |x| of the unscaled inputs, NaN ignored
  unsigned saturated = 0;
  unsigned flushed = 0;
};

// q = cast(x * s), tallied as the CPU quantize does (the product rounded once, as on the CPU).
template <Fp8Format F>
__device__ __forceinline__ uint8_t cast_and_tally(float x, float s, CastTally& t) {
  bool sat, flush;
  const uint8_t q = fp8_encode_device<F>(__fmul_rn(x, s), sat, flush);
  t.amax = fmaxf(t.amax, fabsf(x));  // fmaxf returns the other operand when one is NaN
  t.saturated += sat;
  t.flushed += flush;
  return q;
}

// Sums the tallies of all threads of the block (every thread must call it, the block size
// must be a multiple of 32) and publishes them with one atomic each from thread 0, only to the
// pointers that are non-null. amax is max-accumulated as the bit pattern of a float >= 0, which
// orders like the float (the existing *amax must be >= +0, as every scaling state keeps it).
__device__ __forceinline__ void publish_cast_tally(CastTally t, float* amax,
                                                   unsigned long long* saturated,
                                                   unsigned long long* flushed) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    t.amax = fmaxf(t.amax, __shfl_xor_sync(0xffffffffu, t.amax, offset));
    t.saturated += __shfl_xor_sync(0xffffffffu, t.saturated, offset);
    t.flushed += __shfl_xor_sync(0xffffffffu, t.flushed, offset);
  }
  __shared__ CastTally warp_tally[32];
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned warps = blockDim.x * blockDim.y * blockDim.z / 32;
  if (tid % 32 == 0) warp_tally[tid / 32] = t;
  __syncthreads();
  if (tid != 0) return;
  CastTally sum = warp_tally[0];
  for (unsigned w = 1; w < warps; ++w) {
    sum.amax = fmaxf(sum.amax, warp_tally[w].amax);
    sum.saturated += warp_tally[w].saturated;
    sum.flushed += warp_tally[w].flushed;
  }
  if (amax && sum.amax > 0.0f)
    atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(sum.amax));
  if (saturated && sum.saturated)
    atomicAdd(saturated, static_cast<unsigned long long>(sum.saturated));
  if (flushed && sum.flushed) atomicAdd(flushed, static_cast<unsigned long long>(sum.flushed));
}

}  // namespace fp8lm::cuda
