#pragma once
// RMSNorm over the last dimension of row-major [rows, C] activations (LLaMA-style blocks):
// no mean subtraction, no bias. FP32 math; threads over rows; results do not depend on the
// thread count.
#include <cstdint>

#include "core/fp8_dtype.h"
#include "fp8/quantize.h"

namespace fp8lm::cpu {

// y = x * rstd * gamma per row of C, rstd = 1 / sqrt(mean(x²) + eps), saved [rows] for
// backward. y may alias x.
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int64_t rows,
                     int64_t C, float eps);

// ACCUMULATES into dx and dgamma (+=): dx because the pre-norm residual stream adds the
// gradient of its branches, dgamma so micro-batches add up. rstd from forward.
void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t rows, int64_t C);

// The fused producer: the same math, y leaves as FP8 codes, cast(y * scale) in format f, in
// the same pass. Bit-identical to rmsnorm_forward followed by fp8lm::quantize, stats included.
CastStats rmsnorm_forward_fp8(uint8_t* y, float scale, DType f, float* rstd, const float* x,
                              const float* gamma, int64_t rows, int64_t C, float eps);

// The residual add fused in front, as add_layernorm_forward: s = x + r written out, then
// normalized in the same pass. Bit-identical to adding, then the kernels above.
void add_rmsnorm_forward(float* s, float* y, float* rstd, const float* x, const float* r,
                         const float* gamma, int64_t rows, int64_t C, float eps);
CastStats add_rmsnorm_forward_fp8(float* s, uint8_t* y, float scale, DType f, float* rstd,
                                  const float* x, const float* r, const float* gamma, int64_t rows,
                                  int64_t C, float eps);

namespace ref {
// The oracle: plain loops, double accumulation, no threads.
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int64_t rows,
                     int64_t C, float eps);
void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t rows, int64_t C);
}  // namespace ref

}  // namespace fp8lm::cpu
