// Rotary position embeddings (kernels/cpu/rope.h): a thread per (row, head, pair), the angle
// formed as the CPU forms it, so the two differ only where the rotation's last bit rounds.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride,
                            int64_t heads, int64_t hd, float theta, float sign) {
  const int64_t half = hd / 2, total = rows * heads * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half, h = idx / half % heads, r = idx / (half * heads);
    const float frequency =
        static_cast<float>(1.0 / pow(static_cast<double>(theta), static_cast<double>(2 * i) / hd));
    const float angle = __fmul_rn(static_cast<float>(pos0 + r % T), frequency);
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = sign * static_cast<float>(sin(static_cast<double>(angle)));
    float* lo = x + r * stride + h * hd + i;
    const float a = lo[0], b = lo[half];
    lo[0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    lo[half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

}  // namespace

void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
          int64_t hd, float theta, bool inverse, cudaStream_t stream) {
  const int64_t total = rows * heads * (hd / 2);
  if (total == 0) return;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 1 << 16);
  rope_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, rows, T, pos0, stride, heads, hd, theta, inverse ? -1.0f : 1.0f);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
