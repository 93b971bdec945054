#pragma once
// Matrix products for every precision, through oneDNN's matmul (primitives cached per shape).
// Row-major: C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, where op(X) is X or Xᵀ
// (a transposed operand is stored with its dimensions swapped). Accumulation is FP32.
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"

namespace fp8lm::cpu {

enum class Trans : bool { N = false, T = true };

void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              const float* B, float beta, float* C);

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
               const bf16_t* B, float beta, float* C);

// FP8 operands (codes) as BF16 dot products: every E4M3/E5M2 value is exact in BF16 and each
// product exact in FP32, so this emulates an FP8 GEMM with FP32 accumulation exactly up to
// summation order. Pass alpha = scale_inv_A * scale_inv_B to dequantize the result.
void gemm_fp8(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const uint8_t* A,
              Fp8Format fa, const uint8_t* B, Fp8Format fb, float beta, float* C);

// Converters the GEMM callers use for their operands.
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n);
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, Fp8Format f);

namespace ref {
// Plain loops with double accumulation: the oracle for every precision (operands decoded
// to float first).
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
}  // namespace ref

}  // namespace fp8lm::cpu
