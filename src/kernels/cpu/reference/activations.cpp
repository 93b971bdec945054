// The activation oracle: plain loops in double, no threads, no intrinsics, each activation
// written from its definition (GELU in the tanh form), apart from the functors of
// kernels/activation_ops.h that the fast kernels run.
#include <cmath>
#include <numbers>

#include "fp8lm/error.h"
#include "kernels/cpu/activations.h"

namespace fp8lm::cpu::ref {
namespace {

const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
constexpr double kGeluCubic = 0.044715;

double gelu(double v) {
  return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
}

double gelu_grad(double v) {
  const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
  const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
}

// NaN and -0 pass through.
double relu(double v) {
  return v < 0.0 ? 0.0 : v;
}

// 0 at 0 and for NaN, as the fast kernels.
double relu_grad(double v) {
  return v > 0.0 ? 1.0 : 0.0;
}

double sigmoid(double a) {
  return 1.0 / (1.0 + std::exp(-a));
}

double silu(double a) {
  return a * sigmoid(a);
}

double silu_grad(double a) {
  const double s = sigmoid(a);
  return s + a * s * (1.0 - s);
}

// An activation as the oracle computes it: ungated, y = f(x) and dx = dy f'(x), or 0 where
// f'(x) is (whatever dy is); gated, with f the gate, y = f(a) b, da = g b f'(a), db = g f(a).
struct Math {
  bool gated;
  double (*f)(double);
  double (*grad)(double);
};

Math math(Activation a) {
  switch (a) {
    case Activation::Gelu:
      return {false, gelu, gelu_grad};
    case Activation::Relu:
      return {false, relu, relu_grad};
    case Activation::Swiglu:
      return {true, silu, silu_grad};
    case Activation::Geglu:
      return {true, gelu, gelu_grad};
  }
  throw Error("ref::act_forward: an activation without a reference");
}

}  // namespace

void add_bias(float* y, const float* bias, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = static_cast<float>(static_cast<double>(y[r * C + c]) + bias[c]);
}

void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * C + c];
    dbias[c] = static_cast<float>(dbias[c] + sum);
  }
}

double act_value(Activation act, double x, double value) {
  const Math m = math(act);
  return m.gated ? m.f(x) * value : m.f(x);
}

void act_forward(float* y, const float* h, Activation act, int64_t rows, int64_t F) {
  const bool gated = math(act).gated;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const float* hr = h + r * (gated ? 2 * F : F);
      y[r * F + j] = static_cast<float>(act_value(act, hr[j], gated ? hr[F + j] : 1.0));
    }
  }
}

void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F) {
  const Math m = math(act);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double g = dy[r * F + j];
      if (m.gated) {
        const double a = h[r * 2 * F + j], b = h[r * 2 * F + F + j];
        dh[r * 2 * F + j] = static_cast<float>(g * b * m.grad(a));
        dh[r * 2 * F + F + j] = static_cast<float>(g * m.f(a));
      } else {
        const double d = m.grad(h[r * F + j]);
        dh[r * F + j] = d == 0.0 ? 0.0f : static_cast<float>(g * d);
      }
    }
  }
}

}  // namespace fp8lm::cpu::ref
