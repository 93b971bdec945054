#pragma once
// The normalizations on the device, with the CPU kernels' contracts (kernels/cpu/norms.h) plus
// a trailing stream: FP32 statistics and math, one row per half-warp. The normalized rows leave
// as the ProducerOut asks: FP32, FP8 (codes and statistics, for an FP8 GEMM's input) or BF16
// (for a BF16 GEMM's input), in the same pass. With a residual r, s = x + r is written and
// normalized (r nullptr: x is, and s is not used). Backward accumulates into dx, dgamma and
// dbeta (+=), as on the CPU.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cuda {

void norm_forward(Normalization kind, ProducerOut out, float* s, float* mean, float* rstd,
                  const float* x, const float* r, const float* gamma, const float* beta,
                  int64_t rows, int64_t C, float eps, cudaStream_t stream);
void norm_backward(Normalization kind, float* dx, float* dgamma, float* dbeta, const float* dy,
                   const float* x, const float* gamma, const float* mean, const float* rstd,
                   int64_t rows, int64_t C, cudaStream_t stream);

}  // namespace fp8lm::cuda
