#pragma once
// What every FP8 producer on the device shares: the statistics of CastStats (fp8/quantize.h),
// gathered per thread and committed with one atomic per block. The codecs are the CPU's own
// (core/fp8_dtype.h, core/bf16.h: one source for host and device).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"

#ifdef __CUDACC__
#include "kernels/cuda/reduce.cuh"
#endif

namespace fp8lm::cuda {

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
  bool saturated, flushed;
  const uint8_t code = fp8_encode<F>(__fmul_rn(y, scale), true, &saturated, &flushed);
  stats.amax = fmaxf(stats.amax, fabsf(y));  // fmaxf returns the other operand for a NaN
  stats.saturated += saturated;
  stats.flushed += flushed;
  return code;
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
