// Delayed scaling of many FP8 slots in one launch, one thread per slot. Each step is
// fp8/scaling.cpp's, with the same comparisons and one correctly rounded division each, so a
// slot's scale, scale_inv and history come out with the CPU's bits.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/scaling.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;

__device__ float max_keeping_nan(float a, float b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a < b ? b : a;  // std::max
}

__device__ float compute_scale(float amax, float fp8_max, int margin, float previous) {
  if (!isfinite(amax) || !(amax > 0.0f)) return previous;
  // Scaling by 2^-margin is exact unless the result leaves the normal range, and there
  // both sides clamp (to FLT_MAX or FLT_MIN) whatever the rounding.
  const float s = ldexpf(__fdiv_rn(fp8_max, amax), -margin);
  if (isinf(s)) return FLT_MAX;
  if (s < FLT_MIN) return FLT_MIN;
  return s;
}

__global__ void delayed_scaling_kernel(ScalingSlots slots, int first, int count, int margin,
                                       bool most_recent) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= count) return;
  const int64_t slot = int64_t{first} + k;
  const int H = slots.history_len;
  float* h = slots.amax_history + slot * H;
  const float newest = h[0];
  float amax = newest;
  if (!most_recent) {
    amax = 0.0f;  // std::accumulate's initial value
    for (int i = 0; i < H; ++i) amax = max_keeping_nan(amax, h[i]);
  }
  // std::rotate by one to the left, then [0] restarts: the newest amax moves to the end.
  if (newest != 0.0f) {
    for (int i = 0; i + 1 < H; ++i) h[i] = h[i + 1];
    h[H - 1] = newest;
    h[0] = 0.0f;
  }
  const float scale = compute_scale(amax, slots.fp8_max[slot], margin, slots.scale[slot]);
  slots.scale[slot] = scale;
  slots.scale_inv[slot] = __fdiv_rn(1.0f, scale);
}

__global__ void scale_from_amax_kernel(float* scale, float* scale_inv, const float* amax,
                                       float fp8_max, int margin) {
  const float s = compute_scale(*amax, fp8_max, margin, 1.0f);
  *scale = s;
  *scale_inv = __fdiv_rn(1.0f, s);
}

}  // namespace

void scale_from_amax(float* scale, float* scale_inv, const float* amax, float fp8_max, int margin,
                     cudaStream_t stream) {
  scale_from_amax_kernel<<<1, 1, 0, stream>>>(scale, scale_inv, amax, fp8_max, margin);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void update_delayed_scaling(const ScalingSlots& slots, int first, int count, int margin,
                            AmaxComputeAlgo algo, cudaStream_t stream) {
  if (count <= 0) return;
  if (first < 0 || first > slots.n - count || slots.history_len < 1) {
    throw Error("delayed scaling: slots [" + std::to_string(first) + ", " +
                std::to_string(int64_t{first} + count) + ") outside the " +
                std::to_string(slots.n) + " slots (history length " +
                std::to_string(slots.history_len) + ")");
  }
  const auto blocks = static_cast<unsigned>(ceil_div(count, kThreads));
  delayed_scaling_kernel<<<blocks, kThreads, 0, stream>>>(slots, first, count, margin,
                                                          algo == AmaxComputeAlgo::MostRecent);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
