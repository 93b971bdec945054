// The fused softmax-cross-entropy and greedy argmax on the device: one block per row, FP32,
// in the CPU kernel's steps (kernels/cpu/cross_entropy.cpp): max, exponentials kept in
// dlogits, their sum, then the scaled probabilities. Only the order of the sum and the
// device's expf/logf (within 2 ulp) differ from the CPU, so results agree to rounding.
//
// A target < 0 ignores the row (loss 0, zero gradient) as on the CPU. A target >= V is refused
// on the host before the targets are uploaded (check_targets); a kernel cannot throw, so such
// a row, if one came, would get a NaN loss and NaN gradients.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/loss_embedding.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/loss_ops.h"

namespace fp8lm::cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int kSumThreads = 1024;

struct MaxIgnoringNan {
  __device__ float operator()(float a, float b) const { return loss::max_ignoring_nan(a, b); }
};

__global__ void cross_entropy_kernel(float* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, int64_t V, float grad_scale) {
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  float* d = dlogits == nullptr ? nullptr : dlogits + r * V;
  const int32_t t = targets[r];
  if (t < 0 || t >= V) {
    const float fill = t < 0 ? 0.0f : NAN;
    if (threadIdx.x == 0) losses[r] = fill;
    if (d != nullptr)
      for (int64_t i = threadIdx.x; i < V; i += blockDim.x) d[i] = fill;
    return;
  }
  // Read before the first __syncthreads: after it, d (possibly x itself) is written.
  const float x_target = x[t];
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) m = MaxIgnoringNan{}(m, x[i]);
  m = block_allreduce(m, MaxIgnoringNan{}, -INFINITY);

  // Each thread writes only the elements it read, so dlogits may alias logits.
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float e = expf(x[i] - m);
    if (d != nullptr) d[i] = e;
    sum += e;
  }
  sum = block_allreduce(sum, Sum{}, 0.0f);

  if (d != nullptr) {
    const float k = loss::gradient_factor(grad_scale, sum);
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float g = loss::gradient(d[i], k);
      d[i] = i == t ? loss::gradient_at_target(g, grad_scale) : g;
    }
  }
  if (threadIdx.x == 0) losses[r] = loss::row_loss(logf(sum), x_target, m);
}

// One block: the losses summed in double over a fixed partition and tree.
__global__ void loss_sum_kernel(float* loss_sum, const float* losses, int64_t rows) {
  double s = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += losses[r];
  s = block_allreduce(s, Sum{}, 0.0);
  if (threadIdx.x == 0) *loss_sum = static_cast<float>(s);
}

// The first index of the largest value (NaN ignored; 0 when the row has no number): the
// result of std::max_element on a row without NaN.
struct ArgMax {
  float v;
  int64_t i;  // -1: nothing seen yet
};

__device__ ArgMax better(ArgMax a, ArgMax b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
}

__global__ void argmax_kernel(int32_t* out, const float* logits, int64_t V) {
  const float* x = logits + int64_t{blockIdx.x} * V;
  ArgMax best{0.0f, -1};
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = x[i];
    if (!isnan(v) && (best.i < 0 || v > best.v)) best = {v, i};
  }
  __shared__ ArgMax part[kRowThreads];
  part[threadIdx.x] = best;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half)
      part[threadIdx.x] = better(part[threadIdx.x], part[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(part[0].i < 0 ? 0 : part[0].i);
}

void check_rows(int64_t rows, const char* what) {
  if (rows > 0x7fffffff) throw Error(std::string(what) + ": more than 2^31 - 1 rows");
}

}  // namespace

void softmax_cross_entropy(float* dlogits, float* losses, float* loss_sum, const float* logits,
                           const int32_t* targets, int64_t rows, int64_t V, float grad_scale,
                           cudaStream_t stream) {
  check_rows(rows, "cross-entropy");
  if (rows > 0) {
    cross_entropy_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        dlogits, losses, logits, targets, V, grad_scale);
    FP8LM_CUDA_CHECK_LAUNCH();
  }
  if (loss_sum != nullptr) {
    loss_sum_kernel<<<1, kSumThreads, 0, stream>>>(loss_sum, losses, rows);
    FP8LM_CUDA_CHECK_LAUNCH();
  }
}

void argmax_rows(int32_t* out, const float* logits, int64_t rows, int64_t V, cudaStream_t stream) {
  check_rows(rows, "argmax");
  if (rows == 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(out, logits, V);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
