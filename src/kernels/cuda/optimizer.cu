// The optimizer on the device, each kernel one launch over every parameter. The parameters
// are read as one concatenation of kSpan-element spans, one block per span (a span may cross
// tensors); each block finds its pieces by walking the tensor table, so no per-list plan or
// chunk table is needed. Both kernels compute the same bits on every run: the norm adds its
// partial sums in a fixed tree and order, and AdamW is element-wise.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/adamw_ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/reduce.cuh"

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
  s = block_allreduce(s, Sum{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void norm_kernel(float* norm, float* clip, float max_norm, const double* partial,
                            int64_t n_partial) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n_partial; i += blockDim.x) s += partial[i];
  s = block_allreduce(s, Sum{}, 0.0);
  if (threadIdx.x != 0) return;
  const auto n = static_cast<float>(sqrt(s));
  *norm = n;
  if (clip != nullptr) *clip = adamw::clip_factor(n, max_norm);
}

__global__ void adamw_kernel(const AdamWTensor* tensors, int n_tensors, AdamWHyper hyper,
                             const float* grad_scale, const StepDecision* decision) {
  if (decision != nullptr && decision->skip) return;
  const AdamWHyper h = adamw::with_decision(hyper, decision);
  const float gs = grad_scale == nullptr ? 1.0f : *grad_scale;
  for_each_piece(tensors, n_tensors, [&](const AdamWTensor& t, int64_t b, int64_t e) {
    for (int64_t j = b + threadIdx.x; j < e; j += blockDim.x) {
      adamw::update(t.param[j], t.m[j], t.v[j], __fmul_rn(t.grad[j], gs), h, t.decay);
      if (t.param16 != nullptr) t.param16[j] = bf16_from_float(t.param[j]);
    }
  });
}

unsigned blocks_for(int64_t total_elements) {
  const int64_t blocks = ceil_div(total_elements, kSpan);
  if (blocks > 0x7fffffff) throw Error("optimizer: too many parameter elements for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

size_t grad_norm_scratch_bytes(int64_t total_elements) {
  return sizeof(double) * blocks_for(total_elements);
}

void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* tensors, int n_tensors,
               int64_t total_elements, void* scratch, cudaStream_t stream) {
  const unsigned blocks = blocks_for(total_elements);
  double* partial = blocks > 0 ? static_cast<double*>(scratch) : nullptr;
  if (blocks > 0) {
    sum_of_squares_kernel<<<blocks, kThreads, 0, stream>>>(partial, tensors, n_tensors);
    FP8LM_CUDA_CHECK_LAUNCH();
  }
  norm_kernel<<<1, kFinishThreads, 0, stream>>>(norm, clip, max_norm, partial, blocks);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void adamw_step(const AdamWTensor* tensors, int n_tensors, int64_t total_elements,
                const AdamWHyper& h, const float* grad_scale, const StepDecision* decision,
                cudaStream_t stream) {
  const unsigned blocks = blocks_for(total_elements);
  if (blocks == 0) return;
  adamw_kernel<<<blocks, kThreads, 0, stream>>>(tensors, n_tensors, h, grad_scale, decision);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
