// Delayed scaling of many FP8 slots in one launch, one thread per slot, by the CPU's own rules
// (fp8/scaling_rules.h: one source for host and device), so a slot's scale, scale_inv and
// history come out with the CPU's bits.
#include <cuda_runtime.h>

#include <string>

#include "fp8/scaling_rules.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/scaling.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void delayed_scaling_kernel(ScalingSlots slots, int first, int count, int margin,
                                       bool most_recent) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= count) return;
  const int64_t slot = int64_t{first} + k;
  fp8lm::update_delayed_scaling(slots.amax_history + slot * slots.history_len, slots.history_len,
                                slots.fp8_max[slot], margin, most_recent, slots.scale[slot],
                                slots.scale_inv[slot]);
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
