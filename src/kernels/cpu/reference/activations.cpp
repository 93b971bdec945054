// The activation oracle: plain loops in double, no threads, no intrinsics. GELU is computed
// in the tanh form exactly as written in the header.
#include <cmath>
#include <numbers>

#include "kernels/cpu/activations.h"

namespace fp8lm::cpu::ref {
namespace {

const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
constexpr double kGeluCubic = 0.044715;

double sigmoid(double a) {
  return 1.0 / (1.0 + std::exp(-a));
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

void gelu_forward(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v *
                              (1.0 + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
  }
}

void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
    dx[i] = static_cast<float>(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
  }
}

void relu_forward(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void relu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

void swiglu_forward(float* y, const float* x, int64_t rows, int64_t F) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double a = x[r * 2 * F + j], b = x[r * 2 * F + F + j];
      y[r * F + j] = static_cast<float>(a * sigmoid(a) * b);
    }
  }
}

void swiglu_backward(float* dx, const float* dy, const float* x, int64_t rows, int64_t F) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double a = x[r * 2 * F + j], b = x[r * 2 * F + F + j], g = dy[r * F + j];
      const double s = sigmoid(a);
      dx[r * 2 * F + j] = static_cast<float>(g * b * (s + a * s * (1.0 - s)));
      dx[r * 2 * F + F + j] = static_cast<float>(g * a * s);
    }
  }
}

}  // namespace fp8lm::cpu::ref
