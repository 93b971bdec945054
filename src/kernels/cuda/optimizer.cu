// The optimizer on the device, each kernel one launch over every parameter. The parameters
// are read as one concatenation of kSpan-element spans, one block per span (a span may cross
// tensors); each block finds its pieces by walking the tensor table, so no per-list plan or
// chunk table is needed. Both kernels compute the same bits on every run: the norm adds its
// partial sums in a fixed tree and order, and AdamW is element-wise.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/optimizer.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSpan = 8192;  // elements per block
constexpr int kFinishThreads = 1024;

// Calls f(tensor, begin, end) for the pieces of this block's span, in tensor order, the same
// calls in every thread (so f may synchronize the block or its warps).
template <class F>
__device__ void for_each_piece(const AdamWTensor* tensors, int n_tensors, F f) {
  const int64_t lo = int64_t{blockIdx.x} * kSpan, hi = lo + kSpan;
  int64_t offset = 0;
  for (int k = 0; k < n_tensors && offset < hi; ++k) {
    const int64_t n = tensors[k].n;
    const int64_t b = offset > lo ? offset : lo, e = offset + n < hi ? offset + n : hi;
    if (b < e) {
      const AdamWTensor t = tensors[k];  // a copy: stores through t.param cannot alias it
      f(t, b - offset, e - offset);
    }
    offset += n;
  }
}

template <class T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's sum, in a fixed tree, to thread 0. blockDim.x: a multiple of 32.
__device__ double block_sum(double v) {
  __shared__ double warp_part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    if (lane < static_cast<int>(blockDim.x / 32)) v = warp_part[lane];
    v = warp_sum(v);
  }
  return v;
}

__global__ void sum_of_squares_kernel(double* partial, const AdamWTensor* tensors, int n_tensors) {
  double s = 0.0;
  for_each_piece(tensors, n_tensors, [&](const AdamWTensor& t, int64_t b, int64_t e) {
    // g * g is exact in double (24-bit mantissas), so the fused multiply-add rounds once,
    // as the CPU's separate multiply and add do.
    for (int64_t j = b + threadIdx.x; j < e; j += blockDim.x) {
      const double g = t.grad[j];
      s = fma(g, g, s);
    }
  });
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void norm_kernel(float* norm, float* clip, float max_norm, const double* partial,
                            int64_t n_partial) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n_partial; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  const auto n = static_cast<float>(sqrt(s));
  *norm = n;
  // clip_factor in train/adamw.cpp, each operation rounded on its own.
  if (clip != nullptr)
    *clip = max_norm > 0.0f && n > max_norm ? __fdiv_rn(max_norm, __fadd_rn(n, 1e-6f)) : 1.0f;
}

// The FP8 encoder of core/fp8_dtype.h (fp8_encode<F>, saturating), operation for operation,
// with its saturated/flushed flags. Not __nv_cvt_float_to_fp8: that one returns a positive NaN
// code for every NaN (the CPU keeps the sign, and E5M2's NaN code differs), and the flags need
// the unbounded code anyway. __host__ too, so it can be checked against the CPU codec
// exhaustively on a machine without a GPU.
__host__ __device__ inline uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
__host__ __device__ inline float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

template <Fp8Format F>
__host__ __device__ inline uint8_t encode_fp8(float x, bool& saturated, bool& flushed) {
  constexpr Fp8Consts c = fp8_consts(F);
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  saturated = false;
  flushed = false;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | c.nan_code);
  uint32_t code;
  if (a < c.min_normal_bits) {
    // The add rounds to nearest even at the subnormal spacing (the magic number's ulp).
    code = bits_of(float_of(a) + c.subnormal_magic) - c.magic_bits;
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

// Max-accumulates a non-negative float (or NaN, which sticks) into *dst: such floats order
// as their bit patterns do as ints.
__device__ void atomic_max_nonneg(float* dst, float v) {
  atomicMax(reinterpret_cast<int*>(dst), __float_as_int(v));
}

__global__ void adamw_kernel(const AdamWTensor* tensors, int n_tensors, AdamWHyper h,
                             const float* grad_scale) {
  const float gs = grad_scale == nullptr ? 1.0f : *grad_scale;
  const float one_minus_beta1 = __fsub_rn(1.0f, h.beta1);
  const float one_minus_beta2 = __fsub_rn(1.0f, h.beta2);
  for_each_piece(tensors, n_tensors, [&](const AdamWTensor& t, int64_t b, int64_t e) {
    const bool requant = t.requant.data != nullptr;
    const float qscale = requant ? *t.requant.scale : 0.0f;
    float amax = 0.0f;
    unsigned saturated = 0, flushed = 0;
    for (int64_t j = b + threadIdx.x; j < e; j += blockDim.x) {
      // AdamWStep in train/adamw.cpp, one rounding per operation as there (the CPU is built
      // with -ffp-contract=off; nvcc would otherwise fuse the products into FMAs).
      const float g = __fmul_rn(t.grad[j], gs);
      const float m = __fadd_rn(__fmul_rn(h.beta1, t.m[j]), __fmul_rn(one_minus_beta1, g));
      const float v =
          __fadd_rn(__fmul_rn(h.beta2, t.v[j]), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
      const float update =
          __fdiv_rn(__fdiv_rn(m, h.bc1), __fadd_rn(__fsqrt_rn(__fdiv_rn(v, h.bc2)), h.eps));
      float w = t.param[j];
      w = __fsub_rn(w, __fmul_rn(h.lr, __fadd_rn(update, __fmul_rn(t.decay, w))));
      t.m[j] = m;
      t.v[j] = v;
      t.param[j] = w;
      if (requant) {
        const float y = __fmul_rn(w, qscale);
        bool sat, flush;
        t.requant.data[j] = t.requant.format == Fp8Format::E4M3
                                ? encode_fp8<Fp8Format::E4M3>(y, sat, flush)
                                : encode_fp8<Fp8Format::E5M2>(y, sat, flush);
        const float aw = fabsf(w);
        amax = aw > amax ? aw : amax;  // NaN ignored, as quantize's amax
        saturated += sat;
        flushed += flush;
      }
    }
    if (!requant) return;
    // Every lane of every warp gets here (the piece is the same for the whole block).
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, amax, o);
      amax = other > amax ? other : amax;
    }
    saturated = warp_sum(saturated);
    flushed = warp_sum(flushed);
    if (threadIdx.x % 32 != 0) return;
    if (t.requant.amax != nullptr && amax > 0.0f) atomic_max_nonneg(t.requant.amax, amax);
    if (t.requant.saturated != nullptr && saturated != 0)
      atomicAdd(t.requant.saturated, static_cast<unsigned long long>(saturated));
    if (t.requant.flushed != nullptr && flushed != 0)
      atomicAdd(t.requant.flushed, static_cast<unsigned long long>(flushed));
  });
}

unsigned blocks_for(int64_t total_elements) {
  const int64_t blocks = (total_elements + kSpan - 1) / kSpan;
  if (blocks > 0x7fffffff) throw Error("optimizer: too many parameter elements for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* tensors, int n_tensors,
               int64_t total_elements, cudaStream_t stream) {
  const unsigned blocks = blocks_for(total_elements);
  double* partial = nullptr;
  if (blocks > 0) {
    // Stream-ordered scratch: safe on any stream and under graph capture.
    FP8LM_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&partial), sizeof(double) * blocks, stream));
    sum_of_squares_kernel<<<blocks, kThreads, 0, stream>>>(partial, tensors, n_tensors);
    FP8LM_CUDA_CHECK_LAUNCH();
  }
  norm_kernel<<<1, kFinishThreads, 0, stream>>>(norm, clip, max_norm, partial, blocks);
  FP8LM_CUDA_CHECK_LAUNCH();
  if (partial != nullptr) FP8LM_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

void adamw_step(const AdamWTensor* tensors, int n_tensors, int64_t total_elements,
                const AdamWHyper& h, const float* grad_scale, cudaStream_t stream) {
  const unsigned blocks = blocks_for(total_elements);
  if (blocks == 0) return;
  adamw_kernel<<<blocks, kThreads, 0, stream>>>(tensors, n_tensors, h, grad_scale);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
