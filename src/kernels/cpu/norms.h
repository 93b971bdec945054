#pragma once
// The normalizations (kernels/norm_ops.h: LayerNorm for GPT-2's blocks, RMSNorm for Llama's)
// over the last dimension of row-major [rows, C] activations, on the CPU: one kernel per op
// family over the functors. FP32 math; threads over rows; results do not depend on the thread
// count. mean is written only by a centred normalization (LayerNorm); beta and dbeta are read
// and written only by one, and may be null otherwise.
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8/quantize.h"
#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cpu {

// y = norm(x) per row of C; mean, rstd [rows] are saved for backward. y may alias x. With a
// residual r (a pre-LN block's `x + attention(x)` feeding its second norm), s = x + r is
// written first (the residual stream continues from it and backward reads it) and normalized
// in the same pass, bit-identical to adding, then normalizing s; without one, s is not used.
void norm_forward(Normalization kind, float* y, float* s, float* mean, float* rstd, const float* x,
                  const float* r, const float* gamma, const float* beta, int64_t rows, int64_t C,
                  float eps);
// The fused producer: the same math, but y leaves as FP8 codes, cast(y * scale) in format f in
// the same pass (one row at a time through a per-thread buffer). Bit-identical to norm_forward
// followed by fp8lm::quantize on the whole output, stats included. Where decoded is not null,
// the codes' values also go there as BF16 (casts.h's quantize_fp8).
CastStats norm_forward_fp8(Normalization kind, uint8_t* y, float scale, DType f, float* s,
                           float* mean, float* rstd, const float* x, const float* r,
                           const float* gamma, const float* beta, int64_t rows, int64_t C,
                           float eps, bf16_t* decoded = nullptr);
// The same into a BF16 y (a BF16 GEMM's input), one row at a time: bit-identical to
// norm_forward followed by fp32_to_bf16 on the whole output.
void norm_forward_bf16(Normalization kind, bf16_t* y, float* s, float* mean, float* rstd,
                       const float* x, const float* r, const float* gamma, const float* beta,
                       int64_t rows, int64_t C, float eps);
// The same cast block-scaled as it is made (BlockProducerOut: a stripe of rows at a time, the
// bits of norm_forward then block_cast_pair); the rows are the casts' grid's.
void norm_forward_blocks(Normalization kind, const BlockProducerOut& y, float* s, float* mean,
                         float* rstd, const float* x, const float* r, const float* gamma,
                         const float* beta, int64_t C, float eps);
// ACCUMULATES into dx, dgamma and dbeta (+=): dx because the pre-norm residual stream adds the
// gradient of its branches, dgamma/dbeta so micro-batches add up. mean, rstd from forward.
void norm_backward(Normalization kind, float* dx, float* dgamma, float* dbeta, const float* dy,
                   const float* x, const float* gamma, const float* mean, const float* rstd,
                   int64_t rows, int64_t C);

namespace ref {
// The oracle: plain loops, double accumulation, no threads, written apart from the functors.
// Same contracts as above, without the residual.
void norm_forward(Normalization kind, float* y, float* mean, float* rstd, const float* x,
                  const float* gamma, const float* beta, int64_t rows, int64_t C, float eps);
void norm_backward(Normalization kind, float* dx, float* dgamma, float* dbeta, const float* dy,
                   const float* x, const float* gamma, const float* mean, const float* rstd,
                   int64_t rows, int64_t C);
}  // namespace ref

}  // namespace fp8lm::cpu
