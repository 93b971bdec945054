// block_gemm.h: whether the device has the block-scale modes, and the scale layouts (the
// cuBLASLt call itself is gemm.cu's, beside the other GEMMs).
#include "kernels/cuda/block_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/grid.cuh"

namespace fp8lm::cuda {
namespace {

__host__ __device__ constexpr int64_t round_up4(int64_t n) {
  return (n + 3) / 4 * 4;
}

// dst[o, l] of the layout (block_scale_floats): the grid's scale, or 0 past it.
__global__ void lay_out_kernel(float* dst, BlockScaleGrid g, int64_t outer, int64_t n) {
  const int64_t k_pitch = round_up4(g.k_blocks);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    // 1D: i = l * outer + o (o a row); 2D: i = o * k_pitch + l (o a block of 128 rows).
    const int64_t o = g.two_d ? i / k_pitch : i % outer, l = g.two_d ? i % k_pitch : i / outer;
    dst[i] =
        o < g.outer_blocks && l < g.k_blocks ? g.scales[o * g.outer_stride + l * g.k_stride] : 0.0f;
  }
}

}  // namespace

bool block_scaled_gemm_available() {
#if CUBLAS_VERSION >= 120900
  static const bool runtime_ok = cublasLtGetVersion() >= 120900;
  return runtime_ok && current_device_cc() == 90;
#else
  return false;
#endif
}

int64_t block_scale_floats(const BlockScaleGrid& g, int64_t outer) {
  return g.two_d ? g.outer_blocks * round_up4(g.k_blocks) : g.k_blocks * outer;
}

void lay_out_block_scales(float* dst, const BlockScaleGrid& g, int64_t outer, cudaStream_t stream) {
  const int64_t n = block_scale_floats(g, outer);
  if (n == 0) return;
  constexpr int kThreads = 256;
  lay_out_kernel<<<grid_stride_blocks(n, kThreads, 1024), kThreads, 0, stream>>>(dst, g, outer, n);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
