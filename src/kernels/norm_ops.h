#pragma once
// The normalizations as functors, one per entry of FP8LM_NORMALIZATIONS (fp8lm/model_config.h):
// the per-element math of forward and backward, written once in op_math's arithmetic and run
// by the CPU kernels (kernels/cpu/norms.cpp) and the CUDA kernels (kernels/cuda/norms.cu), which
// therefore agree bit for bit. What the kernels add is the row sums, in the same order on both
// (kernels/cpu/row_reduce.h's lane_sum).
//
// Per row of C: LayerNorm centres on the mean, xhat = (x - mean) * rstd, y = xhat * gamma +
// beta, rstd = 1 / sqrt(var + eps) with the biased variance; RMSNorm takes no mean and no beta,
// xhat = x * rstd, y = xhat * gamma, rstd = 1 / sqrt(mean(x²) + eps). Backward, with
// g = gamma * dy: dx += rstd * (g - mean(g) - xhat * mean(g * xhat)) (RMSNorm: no mean(g)),
// dgamma += dy * xhat, dbeta += dy.
#include "fp8lm/model_config.h"
#include "core/op_math.h"

namespace fp8lm::norm {

namespace m = op_math;

template <bool Centred>
struct Norm {
  // Whether the row is centred on its mean and shifted by beta (LayerNorm): the kernels take
  // the mean's pass, mean(g) and dbeta only then.
  static constexpr bool centred = Centred;

  FP8LM_OP static float rstd(float var, float eps) {
    return m::div(1.0f, m::sqrt(m::add(var, eps)));
  }
  // The variance's term for a value: (x - mean)² for LayerNorm, x² for RMSNorm.
  FP8LM_OP static float spread(float x, float mean) {
    const float d = centred ? m::sub(x, mean) : x;
    return m::mul(d, d);
  }
  FP8LM_OP static float xhat(float x, float mean, float rstd) {
    return m::mul(centred ? m::sub(x, mean) : x, rstd);
  }
  FP8LM_OP static float out(float xhat, float gamma, float beta) {
    return centred ? m::add(m::mul(xhat, gamma), beta) : m::mul(xhat, gamma);
  }
  // What backward adds to dx, from g = gamma * dy and the row's mean(g) and mean(g * xhat).
  FP8LM_OP static float dx(float rstd, float g, float g_mean, float xhat, float gx_mean) {
    return m::mul(rstd, m::sub(centred ? m::sub(g, g_mean) : g, m::mul(xhat, gx_mean)));
  }
};

struct LayerNorm : Norm<true> {};
struct RMSNorm : Norm<false> {};

}  // namespace fp8lm::norm

namespace fp8lm {

// f(norm::LayerNorm{}) for Normalization::LayerNorm, and so on for every entry of
// FP8LM_NORMALIZATIONS, whose functor has the entry's name in fp8lm::norm.
template <class F>
decltype(auto) with_normalization(Normalization n, F&& f) {
  switch (n) {
#define FP8LM_NORMALIZATION_CASE(e, name) \
  case Normalization::e:                  \
    return f(norm::e{});
    FP8LM_NORMALIZATIONS(FP8LM_NORMALIZATION_CASE)
#undef FP8LM_NORMALIZATION_CASE
  }
  __builtin_unreachable();  // every enumerator is a case
}

}  // namespace fp8lm
