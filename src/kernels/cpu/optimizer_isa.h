#pragma once
// The AVX-512 form of AdamW's update (optimizer_avx512.cpp, built with AVX-512 flags), reached
// through optimizer.cpp's dispatch: sixteen elements a vector, the last lanes masked, each step
// the same IEEE operation as adamw::update's in the same order (no fused multiply-adds: every
// product and sum is rounded as the scalar twin rounds it), so the bits are the twin's. The
// compiler leaves the twin scalar: its square root may set errno.
#include <cstdint>

#include "core/bf16.h"
#include "kernels/tensor.h"

namespace fp8lm::cpu {

// Only for CPUs with cpu_features().avx512.
namespace avx512 {
// adamw::update on w, m, v [0, n) with the gradient g[j] * grad_scale; w16 (optional): the new
// w's BF16 (bf16_from_float's bits).
void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float grad_scale,
                  const AdamWHyper& h, float decay, bf16_t* w16);
void adamw_update(float* w, float* m, float* v, const bf16_t* g, int64_t n, float grad_scale,
                  const AdamWHyper& h, float decay, bf16_t* w16);
// partial[i] = the sum of double(g[i][j])^2 over j in [0, n[i]), in order, for eight chunks
// at once: each lane is one chunk's sum taken as grad_norm's scalar loop takes it (each product
// exact in double, each addition rounded in the same order), so the same bits.
void sum_of_squares_8(double* partial, const float* const* g, const int64_t* n);
}  // namespace avx512

}  // namespace fp8lm::cpu
