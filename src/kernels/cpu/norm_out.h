#pragma once
// The norms' entries every backend shares (kernels/cuda/norms.h takes the same arguments over
// device memory, plus a stream): the ProducerOut picks FP32, FP8 (codes, with the amax and
// the saturated/flushed counts accumulated into its statistics) or BF16 output, and a residual
// r, when given, is added first and the sum written to s. They call the CPU kernels of
// layernorm.h / rmsnorm.h, so they give those kernels' bits.
#include <cstdint>

#include "kernels/tensor.h"

namespace fp8lm::cpu {

void layernorm_forward(ProducerOut out, float* s, float* mean, float* rstd, const float* x,
                       const float* r, const float* gamma, const float* beta, int64_t rows,
                       int64_t C, float eps);
void rmsnorm_forward(ProducerOut out, float* s, float* rstd, const float* x, const float* r,
                     const float* gamma, int64_t rows, int64_t C, float eps);

}  // namespace fp8lm::cpu
