#include "kernels/cpu/activations.h"
#include "kernels/cpu/row_reduce.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8lm::cpu {
namespace {

// Flat (n-element) kernels hand out chunks of this many elements.
constexpr int64_t kChunk = int64_t{1} << 13;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// The tanh form rewritten with 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)): the same function, but
// without the cancellation in 1 + tanh u for negative x, and one exp instead of one tanh.
inline float gelu_gate(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 1.0f / (1.0f + std::exp(-2.0f * u));
}

inline float sigmoid(float a) {
  return 1.0f / (1.0f + std::exp(-a));
}

// The rows below are out of line on purpose: the FP32, fused FP32 and fused FP8 kernels run
// the same machine code, so they agree bit for bit whatever the compiler would contract.
[[gnu::noinline]] void gelu_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * gelu_gate(x[i]);
}

[[gnu::noinline]] void relu_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// a and b are the gate and value halves of one row of x.
[[gnu::noinline]] void swiglu_row(float* y, const float* a, const float* b, int64_t F) {
  for (int64_t j = 0; j < F; ++j) y[j] = a[j] * sigmoid(a[j]) * b[j];
}

inline void add_bias_row(float* h, const float* bias, int64_t C) {
  for (int64_t c = 0; c < C; ++c) h[c] += bias[c];
}

// Runs body(begin, length) over fixed chunks of [0, n).
template <typename Body>
void for_chunks(int64_t n, Body body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t k = 0; k < chunks; ++k) body(k * kChunk, std::min(kChunk, n - k * kChunk));
}

// The shared shape of the fused producers: per row, add the bias to h [rows, in_cols] in
// place, apply act(out_row, h_row) into a per-thread buffer of out_cols, cast it to FP8.
template <typename Act>
CastStats bias_act_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                       int64_t rows, int64_t in_cols, int64_t out_cols, Act act) {
  return produce_fp8_rows(y, scale, f, rows, out_cols, rows * in_cols, [&](int64_t r, float* row) {
    float* hr = h + r * in_cols;
    add_bias_row(hr, bias, in_cols);
    act(row, hr);
  });
}

// The FP32 twin of bias_act_fp8: act writes straight into y [rows, out_cols].
template <typename Act>
void bias_act(float* y, float* h, const float* bias, int64_t rows, int64_t in_cols,
              int64_t out_cols, Act act) {
#pragma omp parallel for schedule(static) if (rows * in_cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    float* hr = h + r * in_cols;
    add_bias_row(hr, bias, in_cols);
    act(y + r * out_cols, hr);
  }
}

}  // namespace

void add_bias(float* y, const float* bias, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) add_bias_row(y + r * C, bias, C);
}

void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C) {
  // Threads own blocks of columns and add rows in row order, so every column's sum has the
  // same bits for any thread count.
  constexpr int64_t kCols = 64;
  const int64_t blocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kCols, width = std::min(kCols, C - c0);
    float acc[kCols] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j) acc[j] += dy[r * C + c0 + j];
    for (int64_t j = 0; j < width; ++j) dbias[c0 + j] += acc[j];
  }
}

void gelu_forward(float* y, const float* x, int64_t n) {
  for_chunks(n, [=](int64_t i, int64_t len) { gelu_row(y + i, x + i, len); });
}

void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  // With s = 0.5 (1 + tanh u): gelu' = s + x * 0.5 (1 - tanh² u) * u' = s + 2 x s (1 - s) u'.
  for_chunks(n, [=](int64_t i0, int64_t len) {
    for (int64_t i = i0; i < i0 + len; ++i) {
      const float v = x[i], s = gelu_gate(v);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
    }
  });
}

void relu_forward(float* y, const float* x, int64_t n) {
  for_chunks(n, [=](int64_t i, int64_t len) { relu_row(y + i, x + i, len); });
}

void relu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  for_chunks(n, [=](int64_t i0, int64_t len) {
    for (int64_t i = i0; i < i0 + len; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  });
}

void swiglu_forward(float* y, const float* x, int64_t rows, int64_t F) {
#pragma omp parallel for schedule(static) if (rows * F >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) swiglu_row(y + r * F, x + r * 2 * F, x + r * 2 * F + F, F);
}

void swiglu_backward(float* dx, const float* dy, const float* x, int64_t rows, int64_t F) {
  // silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)), s = sigmoid(a).
#pragma omp parallel for schedule(static) if (rows * F >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = x + r * 2 * F;
    const float* b = a + F;
    const float* g = dy + r * F;
    float* da = dx + r * 2 * F;
    float* db = da + F;
    for (int64_t j = 0; j < F; ++j) {
      const float s = sigmoid(a[j]);
      da[j] = g[j] * b[j] * s * (1.0f + a[j] * (1.0f - s));
      db[j] = g[j] * a[j] * s;
    }
  }
}

CastStats bias_gelu_forward_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                                int64_t rows, int64_t C) {
  return bias_act_fp8(y, scale, f, h, bias, rows, C, C,
                      [C](float* out, const float* hr) { gelu_row(out, hr, C); });
}

CastStats bias_relu_forward_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                                int64_t rows, int64_t C) {
  return bias_act_fp8(y, scale, f, h, bias, rows, C, C,
                      [C](float* out, const float* hr) { relu_row(out, hr, C); });
}

CastStats bias_swiglu_forward_fp8(uint8_t* y, float scale, Fp8Format f, float* h, const float* bias,
                                  int64_t rows, int64_t F) {
  return bias_act_fp8(y, scale, f, h, bias, rows, 2 * F, F,
                      [F](float* out, const float* hr) { swiglu_row(out, hr, hr + F, F); });
}

void bias_gelu_forward(float* y, float* h, const float* bias, int64_t rows, int64_t C) {
  bias_act(y, h, bias, rows, C, C, [C](float* out, const float* hr) { gelu_row(out, hr, C); });
}

void bias_relu_forward(float* y, float* h, const float* bias, int64_t rows, int64_t C) {
  bias_act(y, h, bias, rows, C, C, [C](float* out, const float* hr) { relu_row(out, hr, C); });
}

void bias_swiglu_forward(float* y, float* h, const float* bias, int64_t rows, int64_t F) {
  bias_act(y, h, bias, rows, 2 * F, F,
           [F](float* out, const float* hr) { swiglu_row(out, hr, hr + F, F); });
}

}  // namespace fp8lm::cpu
