// block_gemm.h: the scale layouts, and the cuBLASLt call with the block-scale modes.
#include <atomic>

#include "kernels/cuda/block_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/grid.cuh"

namespace fp8lm::cuda {
namespace {

// cublasLtMatmulMatrixScale_t's values (cublasLt.h of CUDA >= 12.9), named here so that this
// file builds with older headers too, where block_scaled_gemm_available() is false.
constexpr int32_t kVec128 = 4, kBlk128x128 = 5;

std::atomic<int64_t> g_runs{0};

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

bool gemm_block_scaled(int64_t M, int64_t N, int64_t K, float alpha, const BlockScaledOperand& A,
                       const BlockScaledOperand& B, float beta, float* C, cudaStream_t stream) {
  // Row-major C = A · Bᵀ is column-major Cᵀ = B · Aᵀ: our B in cuBLASLt's A slot, transposed
  // (TN), as in gemm.cu.
  const auto lt_type = [](DType t) { return t == DType::E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
  LtProblem p;
  p.transa = CUBLAS_OP_T;
  p.transb = CUBLAS_OP_N;
  p.m = N;
  p.n = M;
  p.k = K;
  p.atype = lt_type(B.type);
  p.btype = lt_type(A.type);
  p.ctype = CUDA_R_32F;
  p.lda = K;
  p.ldb = K;
  p.ldc = N;
  p.fp8 = true;
  p.scale_mode_a = B.two_d ? kBlk128x128 : kVec128;
  p.scale_mode_b = A.two_d ? kBlk128x128 : kVec128;
  p.alpha_nonzero = alpha != 0.0f;
  p.beta_nonzero = beta != 0.0f;

  LtOperands ops;
  ops.a = B.codes;
  ops.b = A.codes;
  ops.c = C;
  ops.scale_a = B.scales;
  ops.scale_b = A.scales;
  LtPlan* plan = lt_plan_if_any(p, ops);
  if (!plan) return false;
  lt_run(*plan, ops, alpha, beta, stream);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t block_scaled_gemms_run() {
  return g_runs.load(std::memory_order_relaxed);
}

}  // namespace fp8lm::cuda
