#include "kernels/cpu/activations.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/activations_isa.h"
#include "kernels/cpu/row_reduce.h"

namespace fp8lm::cpu {

// The portable twins of activations_avx512.cpp: the same steps on the same constants, one
// float at a time and without fused multiply-adds.
namespace scalar {
namespace {

// 2^k for the k that keep it a normal float.
float pow2(int32_t k) {
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// c ? a : b without a branch. Under -ftrapping-math (the default) GCC keeps a float ternary
// as a branch when the code after it folds to constants on one side, and a loop with a branch
// is not vectorized; with masks the rows below run four floats at a time even on baseline
// x86-64 (SSE2).
inline float select(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}

// exp(t), see act_const:: for the method. The comparisons are false for NaN, which passes through.
// 2^n is applied in two exact-range halves, so the one rounding of the second product gives
// subnormals and Inf exactly as AVX-512's scalef does (n ranges over [-150, 129], which no
// single normal power of two spans). n is read from the shifted float's bits, not converted,
// so a NaN never meets a float-to-int conversion.
inline float exp_clamped(float t) {
  t = select(t < act_const::kExpMin, act_const::kExpMin, t);
  t = select(t > act_const::kExpMax, act_const::kExpMax, t);
  const float shifted = t * act_const::kLog2e + act_const::kRoundShift;
  const float n = shifted - act_const::kRoundShift;
  float r = t - n * act_const::kLn2Hi;
  r = r - n * act_const::kLn2Lo;
  float p = act_const::kExp6 * r + act_const::kExp5;
  p = p * r + act_const::kExp4;
  p = p * r + act_const::kExp3;
  p = p * r + act_const::kExp2;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto k = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) -
                                      std::bit_cast<uint32_t>(act_const::kRoundShift));
  const int32_t half = k >> 1;
  return p * pow2(half) * pow2(k - half);
}

// exp(-2u) for GELU's gate sigmoid(2u); x2 = x².
inline float gelu_exp(float x, float x2) {
  return exp_clamped(x * (x2 * act_const::kGateCubic + act_const::kGateLinear));
}

inline float sigmoid(float a) {
  return 1.0f / (1.0f + exp_clamped(-a));
}

}  // namespace

// x * sigmoid(2u) as one division: one rounding instead of two. The tanh form rewritten with
// 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)) is the same function without the cancellation in
// 1 + tanh u for negative x.
void gelu_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + gelu_exp(x[i], x[i] * x[i]));
}

// With s = sigmoid(2u): gelu' = s + 2 x s (1 - s) u' = s (1 + x (1 - s) 2u').
void gelu_backward_row(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], v2 = v * v;
    const float s = 1.0f / (1.0f + gelu_exp(v, v2));
    const float slope = v2 * act_const::kSlopeCubic + act_const::kSlopeLinear;
    dx[i] = dy[i] * (s * ((v * slope) * (1.0f - s) + 1.0f));
  }
}

// silu(a) b, with a sigmoid(a) as one division like gelu.
void swiglu_row(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] / (1.0f + exp_clamped(-a[i])) * b[i];
}

// silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)), s = sigmoid(a).
void swiglu_backward_row(float* da, float* db, const float* g, const float* a, const float* b,
                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(a[i]), gs = g[i] * s;
    const float inner = a[i] * (1.0f - s) + 1.0f;
    da[i] = gs * b[i] * inner;
    db[i] = gs * a[i];
  }
}

void sigmoid_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}

}  // namespace scalar

namespace {

// Flat (n-element) kernels hand out chunks of this many elements.
constexpr int64_t kChunk = int64_t{1} << 13;

bool use_avx512() {
  static const bool on = cpu_features().avx512;
  return on;
}

// The rows below are out of line on purpose: the FP32, fused FP32 and fused FP8 kernels run
// the same machine code, so they agree bit for bit whatever the compiler would contract (or
// inline) in the scalar bodies.
[[gnu::noinline]] void gelu_row(float* y, const float* x, int64_t n) {
  if (use_avx512()) return avx512::gelu_row(y, x, n);
  scalar::gelu_row(y, x, n);
}

[[gnu::noinline]] void relu_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// a and b are the gate and value halves of one row of x.
[[gnu::noinline]] void swiglu_row(float* y, const float* a, const float* b, int64_t F) {
  if (use_avx512()) return avx512::swiglu_row(y, a, b, F);
  scalar::swiglu_row(y, a, b, F);
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
    if (bias) add_bias_row(hr, bias, in_cols);
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
    if (bias) add_bias_row(hr, bias, in_cols);
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
  for_chunks(n, [=](int64_t i, int64_t len) {
    if (use_avx512()) return avx512::gelu_backward_row(dx + i, dy + i, x + i, len);
    scalar::gelu_backward_row(dx + i, dy + i, x + i, len);
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
#pragma omp parallel for schedule(static) if (rows * F >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = x + r * 2 * F;
    float* da = dx + r * 2 * F;
    if (use_avx512()) {
      avx512::swiglu_backward_row(da, da + F, dy + r * F, a, a + F, F);
    } else {
      scalar::swiglu_backward_row(da, da + F, dy + r * F, a, a + F, F);
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
