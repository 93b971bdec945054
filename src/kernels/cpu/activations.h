#pragma once
// Pointwise activations of the MLP (GELU, ReLU, SwiGLU) and the bias that precedes them, with
// the fused producers that add the bias, apply the activation and cast to FP8 in one pass.
// FP32 math; threads over rows or chunks; results do not depend on the thread count.
#include <cstdint>

#include "core/fp8_dtype.h"
#include "fp8/quantize.h"

namespace fp8lm::cpu {

// y[r, c] += bias[c] for row-major y [rows, C].
void add_bias(float* y, const float* bias, int64_t rows, int64_t C);
// ACCUMULATES: dbias[c] += sum over rows of dy[r, c], so micro-batches add up.
void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C);

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))). y may alias x.
void gelu_forward(float* y, const float* x, int64_t n);
// OVERWRITES dx = dy * gelu'(x) (a pointwise op owns its input gradient). dx may alias dy.
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n);

// ReLU: max(x, 0); NaN passes through. y may alias x.
void relu_forward(float* y, const float* x, int64_t n);
// OVERWRITES dx = x > 0 ? dy : 0. dx may alias dy.
void relu_backward(float* dx, const float* dy, const float* x, int64_t n);

// SwiGLU on x [rows, 2F]: the first F columns of a row are the gate a, the last F the value b;
// y [rows, F] = silu(a) * b with silu(a) = a * sigmoid(a).
void swiglu_forward(float* y, const float* x, int64_t rows, int64_t F);
// OVERWRITES dx [rows, 2F]: da = dy * b * silu'(a), db = dy * silu(a).
void swiglu_backward(float* dx, const float* dy, const float* x, int64_t rows, int64_t F);

// Fused producers. h is the GEMM output without bias on entry and h + bias on return (the
// pre-activation backward needs); y = act(h) leaves as FP8 codes, cast(y * scale) in format f.
// Bit-identical to add_bias, then the activation, then fp8lm::quantize on the whole output. A
// null bias adds nothing.
CastStats bias_gelu_forward_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                                int64_t rows, int64_t C);
CastStats bias_relu_forward_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                                int64_t rows, int64_t C);
// h [rows, 2F] in/out as above (bias [2F] added in place), y [rows, F] codes.
CastStats bias_swiglu_forward_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                                  int64_t rows, int64_t F);

// The FP32-output twins used outside FP8: h += bias; y = act(h). Bit-identical to the
// unfused sequence.
void bias_gelu_forward(float* y, float* h, const float* bias, int64_t rows, int64_t C);
void bias_relu_forward(float* y, float* h, const float* bias, int64_t rows, int64_t C);
void bias_swiglu_forward(float* y, float* h, const float* bias, int64_t rows, int64_t F);

namespace ref {
// The oracle: plain loops in double, no threads. Same contracts as above.
void add_bias(float* y, const float* bias, int64_t rows, int64_t C);
void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C);
void gelu_forward(float* y, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n);
void relu_forward(float* y, const float* x, int64_t n);
void relu_backward(float* dx, const float* dy, const float* x, int64_t n);
void swiglu_forward(float* y, const float* x, int64_t rows, int64_t F);
void swiglu_backward(float* dx, const float* dy, const float* x, int64_t rows, int64_t F);
}  // namespace ref

}  // namespace fp8lm::cpu
