#pragma once
// Warp and block reductions in a fixed tree, so that a reduction gives the same bits on every
// run whatever the scheduling. Device code: include only from .cu files.
#include <cuda_runtime.h>

namespace fp8lm::cuda {

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

// fmaxf: a NaN loses to the other operand.
struct Fmax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// op over the warp's 32 values, xor butterfly: lane 0 gets op(op(v0, v16), ...) in a fixed
// order, and every lane the same value when op is commutative. All 32 lanes must call it.
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread gets op over the block's values: each warp's, then the warps' in a fixed tree.
// A 1-D block, blockDim.x a multiple of 32; every thread must call it (it synchronizes the
// block), and may call it again at once.
template <class T, class Op>
__device__ T block_allreduce(T v, Op op, T identity) {
  __shared__ T warp_part[32];
  __shared__ T result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? warp_part[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  const T r = result;
  __syncthreads();  // the next call may overwrite warp_part and result
  return r;
}

}  // namespace fp8lm::cuda
