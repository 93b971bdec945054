#pragma once
// GEMMs through cuBLASLt on row-major buffers, with the CPU GEMM's convention
// (kernels/cpu/gemm.h): C[M,N] = alpha * op(A) · op(B) + beta * C, op(X) = X or Xᵀ, FP32
// accumulation and an FP32 C. Operands are FP32, BF16 or FP8; FP8 operands carry their
// scale_inv as a device pointer, multiplied into the product by cuBLASLt (no host sync).
//
// FP8 on Hopper and Ada takes only C = A · Bᵀ (ta = N, tb = T; cuBLASLt's "TN") with sizes
// that are multiples of 16; any other FP8 call throws. The CUDA backend transposes and pads
// FP8 operands for it (transpose_fp8 in quantize.h).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cuda {

// FP8 uses cuBLASLt's split (precise) accumulation, TE's choice for dgrad and wgrad. BF16
// operands may carry a scale_inv too (a block-scaled recipe's tensor scale, fp8/block_cast.h):
// cuBLASLt's scale pointers are FP8's, so the CUDA backend runs the product into scratch and
// scales it into C (product_scaled_into); this function ignores a BF16 operand's scale_inv.
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A,
          GemmOperand B, float beta, float* C, cudaStream_t stream);

// C = sa * sb * P + beta * C (sa, sb device pointers, nullptr for 1), C not read when beta = 0.
void product_scaled_into(float* C, const float* P, int64_t n, const float* sa, const float* sb,
                         float beta, cudaStream_t stream);

// Batched FP32-output BF16 GEMM over equally strided matrices (attention's Q·Kᵀ and P·V):
// C_i = alpha * op(A_i) · op(B_i) + beta * C_i for i < batch; element strides between
// matrices. A and B are BF16, C FP32 or BF16 (c_bf16).
void gemm_batched_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb,
                       int64_t stride_b, float beta, void* C, bool c_bf16, int64_t ldc,
                       int64_t stride_c, int64_t batch, cudaStream_t stream);

// Bytes of cuBLASLt workspace held for this device (32 MiB on cc >= 9.0, 4 MiB below).
size_t gemm_workspace_bytes();

}  // namespace fp8lm::cuda
