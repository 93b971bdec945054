#pragma once
// The row bodies behind activations.cpp, once in portable C++ (scalar, in activations.cpp) and
// once in AVX-512 (activations_avx512.cpp, the only file built with AVX-512 flags). The
// kernels pick one per call from the CPU's features; tests call both directly to hold them
// against each other. Every output element is a function of its own inputs only (the AVX-512
// rows finish with masked vectors rather than a scalar tail), so where a value sits in a row
// never changes its bits.
#include <cstdint>

#include "kernels/activation_constants.h"

namespace fp8lm::cpu {

// act_const (kernels/activation_constants.h): both twins run one algorithm on the same constants.

namespace scalar {
// y = gelu(x) (tanh form); y may alias x.
void gelu_row(float* y, const float* x, int64_t n);
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward_row(float* dx, const float* dy, const float* x, int64_t n);
// y = silu(a) * b.
void swiglu_row(float* y, const float* a, const float* b, int64_t n);
// da = g * b * silu'(a), db = g * silu(a).
void swiglu_backward_row(float* da, float* db, const float* g, const float* a, const float* b,
                         int64_t n);
// y = 1 / (1 + exp(-x)), the gate both activations are built on; y may alias x.
void sigmoid_row(float* y, const float* x, int64_t n);
}  // namespace scalar

namespace avx512 {
// The same contracts; only for CPUs with cpu_features().avx512.
void gelu_row(float* y, const float* x, int64_t n);
void gelu_backward_row(float* dx, const float* dy, const float* x, int64_t n);
void swiglu_row(float* y, const float* a, const float* b, int64_t n);
void swiglu_backward_row(float* da, float* db, const float* g, const float* a, const float* b,
                         int64_t n);
void sigmoid_row(float* y, const float* x, int64_t n);
}  // namespace avx512

}  // namespace fp8lm::cpu
