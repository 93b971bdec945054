#pragma once
// The MLP's activations, each one functor: its math, forward and backward, written once and
// run by the CPU's portable twin (kernels/cpu/activations.cpp) and the CUDA kernel
// (kernels/cuda/activations.cu), which therefore agree bit for bit. A gated activation
// (gated = true) reads a row [gate | value] of 2F columns and writes F: act(gate) * value.
// The list of activations, their names and Hugging Face's names is FP8LM_ACTIVATIONS
// (fp8lm/model_config.h); with_activation turns an Activation into its functor. Adding one
// is a line in that list, a functor here and its double-precision oracle
// (kernels/cpu/reference/activations.cpp); docs/ARCHITECTURE.md walks through GeGLU.
//
// The exp and GELU's gate follow kernels/activation_constants.h (a clamped Cody-Waite
// reduction and a degree-6 polynomial); the CPU's AVX-512 rows take the same steps with
// fused multiply-adds and can differ in the last bits.
#include "fp8lm/model_config.h"
#include "kernels/activation_constants.h"
#include "core/op_math.h"

namespace fp8lm::act {

namespace m = op_math;
namespace k = act_const;

// 2^e for the e that keep it a normal float.
FP8LM_OP float pow2(int32_t e) {
  return m::from_bits(static_cast<uint32_t>(e + 127) << 23);
}

// exp(t), see act_const for the method. The comparisons are false for NaN, which passes
// through. 2^n is applied in two exact-range halves, so the one rounding of the second product
// gives subnormals and Inf exactly as AVX-512's scalef does (n ranges over [-150, 129], which
// no single normal power of two spans). n is read from the shifted float's bits, not
// converted, so a NaN never meets a float-to-int conversion.
FP8LM_OP float exp_clamped(float t) {
  t = m::select(t < k::kExpMin, k::kExpMin, t);
  t = m::select(t > k::kExpMax, k::kExpMax, t);
  const float shifted = m::add(m::mul(t, k::kLog2e), k::kRoundShift);
  const float n = m::sub(shifted, k::kRoundShift);
  float r = m::sub(t, m::mul(n, k::kLn2Hi));
  r = m::sub(r, m::mul(n, k::kLn2Lo));
  float p = m::add(m::mul(k::kExp6, r), k::kExp5);
  p = m::add(m::mul(p, r), k::kExp4);
  p = m::add(m::mul(p, r), k::kExp3);
  p = m::add(m::mul(p, r), k::kExp2);
  p = m::add(m::mul(p, r), 1.0f);
  p = m::add(m::mul(p, r), 1.0f);
  const auto e = static_cast<int32_t>(m::bits(shifted) - m::bits(k::kRoundShift));
  const int32_t half = e >> 1;
  return m::mul(m::mul(p, pow2(half)), pow2(e - half));
}

FP8LM_OP float sigmoid(float a) {
  return m::div(1.0f, m::add(1.0f, exp_clamped(-a)));
}

// exp(-2u) for GELU's gate sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³); x2 = x².
FP8LM_OP float gelu_exp(float x, float x2) {
  return exp_clamped(m::mul(x, m::add(m::mul(x2, k::kGateCubic), k::kGateLinear)));
}

// GELU, tanh form, rewritten with 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)): the same function
// without the cancellation in 1 + tanh u for negative x, and x * sigmoid(2u) as one division
// (one rounding instead of two).
FP8LM_OP float gelu(float x) {
  return m::div(x, m::add(1.0f, gelu_exp(x, m::mul(x, x))));
}

// gelu'(x) = s + 2 x s (1 - s) u' = s (1 + x (1 - s) 2u'), s = sigmoid(2u).
FP8LM_OP float gelu_grad(float x) {
  const float x2 = m::mul(x, x);
  const float s = m::div(1.0f, m::add(1.0f, gelu_exp(x, x2)));
  const float slope = m::add(m::mul(x2, k::kSlopeCubic), k::kSlopeLinear);
  return m::mul(s, m::add(m::mul(m::mul(x, slope), m::sub(1.0f, s)), 1.0f));
}

struct Gelu {
  static constexpr bool gated = false;
  FP8LM_OP static float forward(float x) { return gelu(x); }
  FP8LM_OP static float backward(float dy, float x) { return m::mul(dy, gelu_grad(x)); }
};

// max(x, 0): NaN and -0 pass through; the gradient is 0 at 0 and for NaN.
struct Relu {
  static constexpr bool gated = false;
  FP8LM_OP static float forward(float x) { return m::select(x < 0.0f, 0.0f, x); }
  FP8LM_OP static float backward(float dy, float x) { return m::select(x > 0.0f, dy, 0.0f); }
};

// silu(a) b, a sigmoid(a) as one division like gelu. Backward: silu'(a) = s (1 + a (1 - s)),
// s = sigmoid(a); da = g s b (1 + a (1 - s)), db = g s a.
struct Swiglu {
  static constexpr bool gated = true;
  FP8LM_OP static float forward(float a, float b) {
    return m::mul(m::div(a, m::add(1.0f, exp_clamped(-a))), b);
  }
  FP8LM_OP static void backward(float g, float a, float b, float& da, float& db) {
    const float s = sigmoid(a), gs = m::mul(g, s);
    const float inner = m::add(m::mul(a, m::sub(1.0f, s)), 1.0f);
    da = m::mul(m::mul(gs, b), inner);
    db = m::mul(gs, a);
  }
};

// gelu(a) b: GeGLU (Gemma's MLP, T5 v1.1's), GELU in the tanh form as above. Backward:
// da = g b gelu'(a), db = g gelu(a).
struct Geglu {
  static constexpr bool gated = true;
  FP8LM_OP static float forward(float a, float b) { return m::mul(gelu(a), b); }
  FP8LM_OP static void backward(float g, float a, float b, float& da, float& db) {
    da = m::mul(m::mul(g, b), gelu_grad(a));
    db = m::mul(g, gelu(a));
  }
};

}  // namespace fp8lm::act

namespace fp8lm {

// f(act::Gelu{}) for Activation::Gelu, and so on for every entry of FP8LM_ACTIVATIONS, whose
// functor has the entry's name in fp8lm::act.
template <class F>
decltype(auto) with_activation(Activation a, F&& f) {
  switch (a) {
#define FP8LM_ACTIVATION_CASE(e, name, hf_name) \
  case Activation::e:                           \
    return f(act::e{});
    FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_CASE)
#undef FP8LM_ACTIVATION_CASE
  }
  __builtin_unreachable();  // every enumerator is a case
}

}  // namespace fp8lm
