#pragma once
// LayerNorm and RMSNorm on the device, with the CPU kernels' signatures (kernels/cpu/
// layernorm.h, rmsnorm.h) plus a trailing stream: FP32 statistics and math, one row per block
// (or warp). Variants write the normalized rows as FP8 (with amax, for an FP8 GEMM's input)
// or BF16 (for a BF16 GEMM's input) in the same pass. The add_* variants first form the
// residual s = x + r, write it, and normalize s. Backward accumulates into dx (+=), and
// dgamma/dbeta (+=), as on the CPU.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/tensor.h"

namespace fp8lm::cuda {

// s (add_ variants only, else nullptr): s = x + r written; r nullptr: plain norm of x.
void layernorm_forward(ProducerOut out, float* s, float* mean, float* rstd, const float* x,
                       const float* r, const float* gamma, const float* beta, int64_t rows,
                       int64_t C, float eps, cudaStream_t stream);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C, cudaStream_t stream);

void rmsnorm_forward(ProducerOut out, float* s, float* rstd, const float* x, const float* r,
                     const float* gamma, int64_t rows, int64_t C, float eps, cudaStream_t stream);
void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t rows, int64_t C, cudaStream_t stream);

}  // namespace fp8lm::cuda
