#pragma once
// Float8BlockScaling's GEMMs on Hopper's block-scaled tensor cores: cuBLASLt's VEC128_32F (one
// FP32 scale per row and 128 values of K) and BLK128x128_32F (one per 128x128 block) scale
// modes, cc 9.0 and cuBLAS >= 12.9 only (docs/cublaslt-block-scaling.md has the sources). The
// operands are FP8 codes in the TN form every FP8 GEMM takes (kernels/cuda/gemm.h), their scales
// laid out as cuBLASLt reads them (lay_out_block_scales); the scales multiply (scale_inv).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace fp8lm::cuda {

// Whether the current device and the cuBLASLt this was built with and runs with have the
// block-scale modes (cc 9.0, cuBLAS 12.9 or later, at compile time and at run time).
bool block_scaled_gemm_available();

// One operand's block scales along the GEMM's K, read from a cast's row-major grid (fp8/
// block_grid.h): the scale of outer block o and K block l is scales[o * outer_stride + l *
// k_stride]. 1D (1x128 along K, one outer block per row) or 2D (128x128).
struct BlockScaleGrid {
  const float* scales = nullptr;
  int64_t outer_blocks = 0, k_blocks = 0;
  int64_t outer_stride = 0, k_stride = 0;
  bool two_d = false;
};

// Floats of cuBLASLt's layout of g for an operand of `outer` rows: 1D (VEC128_32F) [k_blocks,
// outer], outer contiguous; 2D (BLK128x128_32F) [outer_blocks, k_blocks rounded up to 4].
int64_t block_scale_floats(const BlockScaleGrid& g, int64_t outer);

// Writes that layout into dst (16-byte aligned, block_scale_floats floats); rows past the
// grid's (an operand padded to a multiple of 16) and the 2D layout's padding get 0.
void lay_out_block_scales(float* dst, const BlockScaleGrid& g, int64_t outer, cudaStream_t stream);

// One operand: [outer, K] row-major FP8 codes with their scales in cuBLASLt's layout.
struct BlockScaledOperand {
  const void* codes = nullptr;
  DType type = DType::E4M3;
  const float* scales = nullptr;
  bool two_d = false;
};

// C[M, N] = alpha * A · Bᵀ + beta * C (FP32 C, A [M, K] and B [N, K]; M, N and K multiples of
// 16, not both operands 2D, not both E5M2). Returns false, having done nothing, where cuBLASLt
// offers no algorithm; the caller then forms the product another way.
bool gemm_block_scaled(int64_t M, int64_t N, int64_t K, float alpha, const BlockScaledOperand& A,
                       const BlockScaledOperand& B, float beta, float* C, cudaStream_t stream);

// How many GEMMs gemm_block_scaled has run in this process (tests: the native path ran).
int64_t block_scaled_gemms_run();

}  // namespace fp8lm::cuda
