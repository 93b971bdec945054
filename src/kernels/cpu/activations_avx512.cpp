// Built with AVX-512 flags (src/CMakeLists.txt); reached only through activations.cpp's
// dispatch. The functors of kernels/activation_ops.h (the portable twins) take the same steps
// with the same constants; here the multiply-adds are fused, so the last bits can differ.
#include <immintrin.h>

#include <algorithm>

#include "fp8/lanes_avx512.h"
#include "kernels/activation_constants.h"
#include "kernels/cpu/activations_isa.h"

namespace fp8lm::cpu::avx512 {
namespace {

constexpr int64_t kWidth = 16;

__m512 splat(float v) {
  return _mm512_set1_ps(v);
}

// Lanes [0, left) of a final, partial vector. Finishing rows with masked vectors rather than
// a scalar loop gives every element the same arithmetic wherever it sits in the row.
__mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>((1u << left) - 1u);
}

// exp(t), see act_const:: for the method. max and min return their second operand when either is
// NaN, so a NaN t stays NaN; scalef multiplies by 2^n with a single rounding, which gives
// subnormal results near kExpMin and Inf past the top, exactly as the correctly rounded
// product would.
__m512 exp_clamped(__m512 t) {
  t = _mm512_max_ps(splat(act_const::kExpMin), t);
  t = _mm512_min_ps(splat(act_const::kExpMax), t);
  const __m512 shift = splat(act_const::kRoundShift);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(t, splat(act_const::kLog2e), shift), shift);
  __m512 r = _mm512_fnmadd_ps(n, splat(act_const::kLn2Hi), t);
  r = _mm512_fnmadd_ps(n, splat(act_const::kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(splat(act_const::kExp6), r, splat(act_const::kExp5));
  p = _mm512_fmadd_ps(p, r, splat(act_const::kExp4));
  p = _mm512_fmadd_ps(p, r, splat(act_const::kExp3));
  p = _mm512_fmadd_ps(p, r, splat(act_const::kExp2));
  p = _mm512_fmadd_ps(p, r, splat(1.0f));
  p = _mm512_fmadd_ps(p, r, splat(1.0f));
  return _mm512_scalef_ps(p, n);
}

__m512 neg(__m512 v) {
  return _mm512_xor_ps(v, splat(-0.0f));
}

// exp(-2u) for GELU's gate sigmoid(2u); x2 = x².
__m512 gelu_exp(__m512 x, __m512 x2) {
  const __m512 t = _mm512_mul_ps(
      x, _mm512_fmadd_ps(x2, splat(act_const::kGateCubic), splat(act_const::kGateLinear)));
  return exp_clamped(t);
}

// x * sigmoid(2u) as one division: one rounding instead of two.
__m512 gelu(__m512 x) {
  const __m512 e = gelu_exp(x, _mm512_mul_ps(x, x));
  return _mm512_div_ps(x, _mm512_add_ps(splat(1.0f), e));
}

// With s = sigmoid(2u): gelu' = s + 2 x s (1 - s) u' = s (1 + x (1 - s) 2u').
__m512 gelu_backward(__m512 dy, __m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 one = splat(1.0f);
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, gelu_exp(x, x2)));
  const __m512 slope =
      _mm512_fmadd_ps(x2, splat(act_const::kSlopeCubic), splat(act_const::kSlopeLinear));
  const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(x, slope), _mm512_sub_ps(one, s), one);
  return _mm512_mul_ps(dy, _mm512_mul_ps(s, inner));
}

__m512 sigmoid(__m512 a) {
  const __m512 one = splat(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_clamped(neg(a))));
}

// silu(a) b, with a sigmoid(a) as one division like gelu.
__m512 swiglu(__m512 a, __m512 b) {
  const __m512 silu = _mm512_div_ps(a, _mm512_add_ps(splat(1.0f), exp_clamped(neg(a))));
  return _mm512_mul_ps(silu, b);
}

// silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)), s = sigmoid(a).
void swiglu_backward(__m512 g, __m512 a, __m512 b, __m512& da, __m512& db) {
  const __m512 s = sigmoid(a);
  const __m512 gs = _mm512_mul_ps(g, s);
  const __m512 inner = _mm512_fmadd_ps(a, _mm512_sub_ps(splat(1.0f), s), splat(1.0f));
  da = _mm512_mul_ps(_mm512_mul_ps(gs, b), inner);
  db = _mm512_mul_ps(gs, a);
}

// y[i] = f(x[i]) over a row, the tail under a mask; y may alias x.
template <class F>
void map_row(float* y, const float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 m = tail_mask(n - i);
  _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
}

}  // namespace

void gelu_row(float* y, const float* x, int64_t n) {
  map_row(y, x, n, [](__m512 v) { return gelu(v); });
}

void gelu_backward_row(float* dx, const float* dy, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth)
    _mm512_storeu_ps(dx + i, gelu_backward(_mm512_loadu_ps(dy + i), _mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 m = tail_mask(n - i);
  _mm512_mask_storeu_ps(
      dx + i, m, gelu_backward(_mm512_maskz_loadu_ps(m, dy + i), _mm512_maskz_loadu_ps(m, x + i)));
}

void swiglu_row(float* y, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth)
    _mm512_storeu_ps(y + i, swiglu(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i == n) return;
  const __mmask16 m = tail_mask(n - i);
  _mm512_mask_storeu_ps(y + i, m,
                        swiglu(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
}

void swiglu_backward_row(float* da, float* db, const float* g, const float* a, const float* b,
                         int64_t n) {
  __m512 va, vb;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    swiglu_backward(_mm512_loadu_ps(g + i), _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), va, vb);
    _mm512_storeu_ps(da + i, va);
    _mm512_storeu_ps(db + i, vb);
  }
  if (i == n) return;
  const __mmask16 m = tail_mask(n - i);
  swiglu_backward(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, a + i),
                  _mm512_maskz_loadu_ps(m, b + i), va, vb);
  _mm512_mask_storeu_ps(da + i, m, va);
  _mm512_mask_storeu_ps(db + i, m, vb);
}

void sigmoid_row(float* y, const float* x, int64_t n) {
  map_row(y, x, n, [](__m512 v) { return sigmoid(v); });
}

namespace {

__mmask16 live_of(int64_t left) {
  return left >= kWidth ? __mmask16(0xffff) : left > 0 ? tail_mask(left) : __mmask16(0);
}

// sums[j] += dy[r * stride + j] for rows r in order, j < width <= 256: sixteen registers held
// across the rows (a sum kept in memory would wait on its own store every row). With Copy, each
// value also leaves rounded to BF16 at dy16[r * stride + j] (fp32_to_bf16's bits).
template <bool Copy>
void add_rows(float* sums, const float* dy, bf16_t* dy16, int64_t rows, int64_t stride,
              int64_t width) {
  __m512 acc[16];
  __mmask16 live[16];
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) {
    live[v] = live_of(width - v * kWidth);
    acc[v] = _mm512_maskz_loadu_ps(live[v], sums + v * kWidth);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * stride;
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) {
      const __m512 x = _mm512_maskz_loadu_ps(live[v], row + v * kWidth);
      acc[v] = _mm512_add_ps(acc[v], x);
      if constexpr (Copy) isa::store_bf16(dy16 + r * stride + v * kWidth, x, live[v]);
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) _mm512_mask_storeu_ps(sums + v * kWidth, live[v], acc[v]);
}

}  // namespace

void column_sums(float* dbias, const float* dy, int64_t rows, int64_t stride, int64_t width,
                 bf16_t* dy16) {
  // Sixteen rows at a time across all the columns, the sums in L1 between them: a pass down
  // the rows per 256 columns would touch a new page every row of a wide dy.
  constexpr int64_t kRows = 16, kCols = 256;
  alignas(64) float sums[kColumnSumsWidth];
  for (int64_t c0 = 0; c0 < width; c0 += kWidth)
    _mm512_mask_storeu_ps(sums + c0, live_of(width - c0), _mm512_setzero_ps());
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    for (int64_t c0 = 0; c0 < width; c0 += kCols) {
      const int64_t at = r0 * stride + c0, n = std::min(kRows, rows - r0);
      const int64_t w = std::min(kCols, width - c0);
      if (dy16) {
        add_rows<true>(sums + c0, dy + at, dy16 + at, n, stride, w);
      } else {
        add_rows<false>(sums + c0, dy + at, nullptr, n, stride, w);
      }
    }
  }
  for (int64_t c0 = 0; c0 < width; c0 += kWidth) {
    const __mmask16 live = live_of(width - c0);
    _mm512_mask_storeu_ps(dbias + c0, live,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(live, dbias + c0),
                                        _mm512_maskz_loadu_ps(live, sums + c0)));
  }
}

}  // namespace fp8lm::cpu::avx512
