#pragma once
// LayerNorm over the last dimension of row-major [rows, C] activations (pre-LN transformer:
// ln1, ln2, lnf). FP32 math; threads over rows; results do not depend on the thread count.
#include <cstdint>

#include "core/fp8_dtype.h"
#include "fp8/quantize.h"

namespace fp8lm::cpu {

// y = (x - mean) * rstd * gamma + beta per row of C, rstd = 1 / sqrt(var + eps) with the
// biased variance; mean, rstd [rows] are saved for backward. y may alias x.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps);

// ACCUMULATES into dx, dgamma and dbeta (+=): dx because the pre-LN residual stream adds the
// gradient of its branches, dgamma/dbeta so micro-batches add up. mean, rstd from forward.
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C);

// The fused producer: the same math, but y leaves as FP8 codes, cast(y * scale) in format f in
// the same pass (one row at a time through a per-thread buffer). Bit-identical to
// layernorm_forward followed by fp8lm::quantize on the whole output, stats included.
CastStats layernorm_forward_fp8(uint8_t* y, float scale, DType f, float* mean, float* rstd,
                                const float* x, const float* gamma, const float* beta, int64_t rows,
                                int64_t C, float eps);

// The residual add fused in front (a pre-LN block's `x + attention(x)` feeding LayerNorm 2):
// s = x + r is written out (the residual stream continues from it and backward reads it),
// then normalized in the same pass over the row. Bit-identical to adding, then the kernels
// above.
void add_layernorm_forward(float* s, float* y, float* mean, float* rstd, const float* x,
                           const float* r, const float* gamma, const float* beta, int64_t rows,
                           int64_t C, float eps);
CastStats add_layernorm_forward_fp8(float* s, uint8_t* y, float scale, DType f, float* mean,
                                    float* rstd, const float* x, const float* r, const float* gamma,
                                    const float* beta, int64_t rows, int64_t C, float eps);

namespace ref {
// The oracle: plain loops, double accumulation, no threads.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C);
}  // namespace ref

}  // namespace fp8lm::cpu
