#pragma once
// The AVX-512 rows behind activations.cpp (activations_avx512.cpp, the only file built with
// AVX-512 flags) for the activations where they pay: GELU and SwiGLU. They take the steps of
// the functors in kernels/activation_ops.h on the same constants (act_const), with fused
// multiply-adds; tests hold them against the portable twins (cpu::scalar). Every output
// element is a function of its own inputs only (the rows finish with masked vectors rather
// than a scalar tail), so where a value sits in a row never changes its bits.
#include <cstdint>

#include "core/bf16.h"

namespace fp8lm::cpu {

// Only for CPUs with cpu_features().avx512.
namespace avx512 {
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
// dbias[j] += the sum of dy[r * stride + j] over rows r, for j < width <= kColumnSumsWidth: the
// rows added in order from zero, each column on its own, as the portable loop adds them (the
// same bits; additions only, so no fused operation can differ). Where dy16 is not null, each
// value read also goes there rounded to BF16, at its place in dy.
inline constexpr int64_t kColumnSumsWidth = 4096;
void column_sums(float* dbias, const float* dy, int64_t rows, int64_t stride, int64_t width,
                 bf16_t* dy16 = nullptr);
}  // namespace avx512

}  // namespace fp8lm::cpu
