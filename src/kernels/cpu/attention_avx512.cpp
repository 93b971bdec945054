// Built with AVX-512 flags (src/CMakeLists.txt); reached only through attention.cpp's dispatch.
// The kernels are register-blocked small matrix products: a block of rows keeps its
// accumulators in zmm registers while the shared operand streams past once per block. Every
// output element is still one fixed chain of operations that does not depend on how rows are
// grouped, which keeps a query's result independent of its block (decode == forward).
// Loops over registers carry #pragma GCC unroll: unrolled that early, GCC keeps the accumulator
// arrays in registers, whereas unrolled later it stores them to the stack on every iteration.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/attention_isa.h"

namespace fp8lm::cpu::avx512 {
namespace {

using attention_tiles::Kernels;
using attention_tiles::kKeyTile;
using attention_tiles::Visibility;
using namespace attention_regs;  // NOLINT: the register helpers this file is written in

// e^x from e^x = 2^n e^r, n = round(x / ln 2), |r| <= ln(2) / 2, with 2^n built in the exponent
// bits. Results below e^-87 (just above the smallest normal float) flush to 0, so no subnormal
// weight slows the FMAs that consume it; next to the largest weight (1) they are nothing.
// Callers pass x <= 0 up to rounding (a score minus its row's maximum or log-sum-exp); x above
// 88 reads as 88. NaN stays NaN.
__m512 exp16(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);  // operand order: a NaN x passes through
  // Adding 1.5 * 2^23 rounds x / ln 2 to an integer held in the low mantissa bits; the extra 127
  // is the exponent bias, so those bits shifted into the exponent field make 2^n.
  const __m512 shifter = _mm512_set1_ps(12582912.0f + 127.0f);
  const __m512 biased = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), shifter);
  const __m512 n = _mm512_sub_ps(biased, shifter);
  // ln 2 split so that n * hi is exact (hi has 9 significant bits, |n| < 2^8): r then carries
  // only the rounding of the two subtractions.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  // Taylor series through r^7: the first omitted term, r^8 / 8!, is below 2^-27 for
  // |r| <= ln(2) / 2, so rounding (about an ulp) dominates.
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i two_n = _mm512_slli_epi32(_mm512_castps_si512(biased), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(two_n));
}

// log x for positive normal x: x = 2^k m with m in [0.75, 1.5), and log m = 2 atanh(s) =
// 2 (s + s^3/3 + s^5/5 + ...) with s = (m - 1) / (m + 1), |s| <= 1/5. Through s^9 the first
// omitted term is below 2^-26 of log m.
__m512 log16(__m512 x) {
  const __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_zero);
  const __m512 k = _mm512_sub_ps(_mm512_getexp_ps(x), _mm512_getexp_ps(m));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 s = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one));
  const __m512 s2 = _mm512_mul_ps(s, s);
  __m512 q = _mm512_set1_ps(2.0f / 9.0f);
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(2.0f / 7.0f));
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(2.0f / 5.0f));
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(2.0f / 3.0f));
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(2.0f));
  return _mm512_fmadd_ps(k, _mm512_set1_ps(0.693147181f), _mm512_mul_ps(q, s));
}

__m512 add16(__m512 a, __m512 b) {
  return _mm512_add_ps(a, b);
}

__m512 max16(__m512 a, __m512 b) {
  return _mm512_max_ps(a, b);
}

// Lane r of the result is op over all lanes of v[r]: sixteen horizontal reductions for the
// shuffles of about three. Each row's lanes combine in one fixed pattern whatever the other
// rows hold, so a row's result doesn't depend on its neighbours.
template <class Op>
__m512 reduce16(const __m512 (&v)[16], Op op) {
  // Halves: a[i] holds rows 2i and 2i + 1, 8 partial lanes each.
  __m512 a[8];
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    a[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  // Quarters: 128-bit lane k of b[i] holds row 4i + k.
  __m512 b[4];
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    b[i] = op(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
              _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
  }
  // Pairs: lane k of c[i] holds rows 8i + k and 8i + 4 + k, two partials each.
  __m512 c[2];
#pragma GCC unroll 16
  for (int i = 0; i < 2; ++i) {
    c[i] = op(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
              _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
  }
  // Element e of 128-bit lane k now holds row 4e + k; the permutation puts row r in lane r.
  const __m512 d = op(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), d);
}

void transpose_tile(float* dst, const float* rows, int64_t stride, int64_t n, int64_t hd) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
      const __mmask16 dims = first_lanes(hd - d0);
      __m512 a[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        a[i] = j0 + i < n ? _mm512_maskz_loadu_ps(dims, rows + (j0 + i) * stride + d0)
                          : _mm512_setzero_ps();
      }
      transpose16(a);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        if (d0 + i < hd) _mm512_storeu_ps(dst + (d0 + i) * kKeyTile + j0, a[i]);
    }
  }
}

void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
               int64_t hd) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 m = first_lanes(hd - d);
      _mm512_mask_storeu_ps(dst + r * dst_stride + d, m,
                            _mm512_maskz_loadu_ps(m, src + r * src_stride + d));
    }
  }
}

// R rows x NV vectors of 16 keys: per head dimension, NV loads of the tile and R broadcasts
// feed R * NV independent FMA chains.
template <int R, int NV>
void scores_block(float* s, const float* x, int64_t x_stride, const float* tile_t, int64_t hd,
                  float scale) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    __m512 column[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) column[v] = _mm512_loadu_ps(tile_t + d * kKeyTile + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * x_stride + d]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xr, column[v], acc[r][v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(s + r * kKeyTile + 16 * v, _mm512_mul_ps(acc[r][v], sc));
}

template <int R>
void scores_rows(float* s, const float* x, int64_t x_stride, int64_t nv, const float* tile_t,
                 int64_t hd, float scale) {
  with_key_vectors(nv, [&]<int NV>() { scores_block<R, NV>(s, x, x_stride, tile_t, hd, scale); });
}

void scores(float* s, const float* x, int64_t x_stride, int64_t nq, const float* tile_t, int64_t hd,
            float scale, Visibility vis) {
  static_assert(kKeyTile == 64, "scores_rows covers at most 4 vectors of keys");
  // 6 rows x 4 vectors: 24 accumulators, leaving registers for the tile's 4 and a broadcast.
  constexpr int64_t kRows = 6;
  int64_t r = 0;
  for (; r + kRows <= nq; r += kRows) {
    // Later rows see more keys: the group's last row decides how many vectors to compute.
    scores_rows<kRows>(s + r * kKeyTile, x + r * x_stride, x_stride,
                       vectors(vis.visible(r + kRows - 1)), tile_t, hd, scale);
  }
  for (; r < nq; ++r) {
    scores_rows<1>(s + r * kKeyTile, x + r * x_stride, x_stride, vectors(vis.visible(r)), tile_t,
                   hd, scale);
  }
}

// Rows go in groups of 16 so that their maxima, sums and rescale factors are computed sixteen
// to a vector; a group past the last row is padded with empty rows.
void softmax_forward(float* s, float* row_max, float* row_sum, float* alpha, int64_t nq,
                     Visibility vis) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t r0 = 0; r0 < nq; r0 += 16) {
    const int64_t rows = std::min<int64_t>(16, nq - r0);
    const __mmask16 live = first_lanes(rows);
    __m512 part[16];
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t n = i < rows ? vis.visible(r0 + i) : 0;
      const float* row = s + (r0 + i) * kKeyTile;
      part[i] = neg_inf;
      for (int64_t j = 0; j < n; j += 16) {
        part[i] =
            _mm512_mask_max_ps(part[i], first_lanes(n - j), part[i], _mm512_loadu_ps(row + j));
      }
    }
    // On the first tile the old maximum is -inf, so alpha = exp(-inf) = 0 clears nothing that
    // isn't already zero; after that, re-basing on the new maximum keeps exp from overflowing.
    const __m512 old_max = _mm512_mask_loadu_ps(neg_inf, live, row_max + r0);
    const __m512 new_max = _mm512_max_ps(old_max, reduce16(part, max16));
    const __m512 a = exp16(_mm512_sub_ps(old_max, new_max));
    _mm512_mask_storeu_ps(row_max + r0, live, new_max);
    _mm512_mask_storeu_ps(alpha + r0, live, a);
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t n = i < rows ? vis.visible(r0 + i) : 0;
      float* row = s + (r0 + i) * kKeyTile;
      const __m512 m = _mm512_set1_ps(i < rows ? row_max[r0 + i] : 0.0f);
      part[i] = _mm512_setzero_ps();
      for (int64_t j = 0; j < n; j += 16) {
        const __m512 p = _mm512_maskz_mov_ps(first_lanes(n - j),
                                             exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), m)));
        _mm512_storeu_ps(row + j, p);
        part[i] = _mm512_add_ps(part[i], p);
      }
    }
    const __m512 old_sum = _mm512_maskz_loadu_ps(live, row_sum + r0);
    _mm512_mask_storeu_ps(row_sum + r0, live, _mm512_fmadd_ps(old_sum, a, reduce16(part, add16)));
  }
}

void finish_rows(float* out, int64_t out_stride, float* lse, const float* acc, int64_t acc_stride,
                 const float* row_max, const float* row_sum, int64_t nq, int64_t hd) {
  for (int64_t r0 = 0; r0 < nq; r0 += 16) {
    const int64_t rows = std::min<int64_t>(16, nq - r0);
    const __mmask16 live = first_lanes(rows);
    const __m512 sum = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), live, row_sum + r0);
    if (lse) {
      const __m512 max = _mm512_maskz_loadu_ps(live, row_max + r0);
      _mm512_mask_storeu_ps(lse + r0, live, _mm512_add_ps(max, log16(sum)));
    }
    alignas(64) float inv_sum[16];
    _mm512_store_ps(inv_sum, _mm512_div_ps(_mm512_set1_ps(1.0f), sum));
    for (int64_t i = 0; i < rows; ++i) {
      const __m512 inv = _mm512_set1_ps(inv_sum[i]);
      const float* acc_row = acc + (r0 + i) * acc_stride;
      float* out_row = out + (r0 + i) * out_stride;
      for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 m = first_lanes(hd - d);
        _mm512_mask_storeu_ps(out_row + d, m,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc_row + d), inv));
      }
    }
  }
}

void softmax_backward(float* p, float* ds, const float* lse, const float* delta, int64_t nq,
                      float scale, Visibility vis) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t n = vis.visible(r);
    float* p_r = p + r * kKeyTile;
    float* ds_r = ds + r * kKeyTile;
    const __m512 l = _mm512_set1_ps(lse[r]);
    const __m512 dl = _mm512_set1_ps(delta[r]);
    for (int64_t j = 0; j < vis.n; j += 16) {
      if (j >= n) {  // keys this row doesn't see: no exp to take
        _mm512_storeu_ps(p_r + j, _mm512_setzero_ps());
        _mm512_storeu_ps(ds_r + j, _mm512_setzero_ps());
        continue;
      }
      const __mmask16 seen = first_lanes(n - j);
      const __m512 pj =
          _mm512_maskz_mov_ps(seen, exp16(_mm512_sub_ps(_mm512_loadu_ps(p_r + j), l)));
      const __m512 dpj = _mm512_sub_ps(_mm512_loadu_ps(ds_r + j), dl);
      _mm512_storeu_ps(p_r + j, pj);
      _mm512_storeu_ps(ds_r + j, _mm512_maskz_mul_ps(seen, _mm512_mul_ps(pj, dpj), sc));
    }
  }
}

// R rows of y, ND vectors each, accumulate weighted rows of x. Row r sees the first
// first_seen + r keys, capped at last_seen (the group's last row).
template <int R, int ND>
void rows_block(float* y, int64_t y_stride, const float* alpha, bool overwrite, const float* p,
                const float* x, int64_t x_stride, __mmask16 tail, int64_t first_seen,
                int64_t last_seen) {
  __m512 acc[R][ND];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) {
      if (overwrite) {
        acc[r][k] = _mm512_setzero_ps();
      } else {
        acc[r][k] = load_part<ND>(y + r * y_stride, k, tail);
        if (alpha) acc[r][k] = _mm512_mul_ps(acc[r][k], _mm512_set1_ps(alpha[r]));
      }
    }
  }
  int64_t j = 0;
  for (; j < first_seen; ++j) {  // keys every row of the group sees
    __m512 w[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) w[r] = _mm512_set1_ps(p[r * kKeyTile + j]);
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) {
      const __m512 xk = load_part<ND>(x + j * x_stride, k, tail);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][k] = _mm512_fmadd_ps(w[r], xk, acc[r][k]);
    }
  }
  // Along the causal diagonal a key joins row by row; each row takes just the keys it sees, in
  // order, so its sum is exactly that of its own keys (zero weights could flip a -0).
#pragma GCC unroll 16
  for (int r = 1; r < R; ++r) {
    for (int64_t jr = j; jr < std::min(first_seen + r, last_seen); ++jr) {
      const __m512 w = _mm512_set1_ps(p[r * kKeyTile + jr]);
#pragma GCC unroll 16
      for (int k = 0; k < ND; ++k)
        acc[r][k] = _mm512_fmadd_ps(w, load_part<ND>(x + jr * x_stride, k, tail), acc[r][k]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) store_part<ND>(y + r * y_stride, k, tail, acc[r][k]);
}

template <int ND>
void accumulate_rows_nd(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                        const float* p, int64_t nq, const float* x, int64_t x_stride,
                        __mmask16 tail, Visibility vis) {
  constexpr int kRows = rows_per_block(ND);
  int64_t r = 0;
  for (; r + kRows <= nq; r += kRows) {
    rows_block<kRows, ND>(y + r * y_stride, y_stride, alpha ? alpha + r : nullptr, overwrite,
                          p + r * kKeyTile, x, x_stride, tail, vis.visible(r),
                          vis.visible(r + kRows - 1));
  }
  for (; r < nq; ++r) {
    rows_block<1, ND>(y + r * y_stride, y_stride, alpha ? alpha + r : nullptr, overwrite,
                      p + r * kKeyTile, x, x_stride, tail, vis.visible(r), vis.visible(r));
  }
}

void accumulate_rows(float* y, int64_t y_stride, const float* alpha, bool overwrite, const float* p,
                     int64_t nq, const float* x, int64_t x_stride, int64_t hd, Visibility vis) {
  for_each_chunk(hd, [&]<int ND>(int64_t d0, __mmask16 tail) {
    accumulate_rows_nd<ND>(y + d0, y_stride, alpha, overwrite, p, nq, x + d0, x_stride, tail, vis);
  });
}

// R consecutive keys (columns of p) of y, ND vectors each, accumulate rows [r_begin, nq) of x.
template <int R, int ND>
void columns_block(float* y, int64_t y_stride, bool overwrite, const float* p, int64_t r_begin,
                   int64_t nq, const float* x, int64_t x_stride, __mmask16 tail) {
  __m512 acc[R][ND];
#pragma GCC unroll 16
  for (int c = 0; c < R; ++c) {
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k)
      acc[c][k] = overwrite ? _mm512_setzero_ps() : load_part<ND>(y + c * y_stride, k, tail);
  }
  for (int64_t r = r_begin; r < nq; ++r) {
    __m512 w[R];
#pragma GCC unroll 16
    for (int c = 0; c < R; ++c) w[c] = _mm512_set1_ps(p[r * kKeyTile + c]);
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) {
      const __m512 xk = load_part<ND>(x + r * x_stride, k, tail);
#pragma GCC unroll 16
      for (int c = 0; c < R; ++c) acc[c][k] = _mm512_fmadd_ps(w[c], xk, acc[c][k]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < R; ++c)
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) store_part<ND>(y + c * y_stride, k, tail, acc[c][k]);
}

template <int ND>
void accumulate_columns_nd(float* y, int64_t y_stride, bool overwrite, const float* p, int64_t nq,
                           const float* x, int64_t x_stride, __mmask16 tail, Visibility vis) {
  constexpr int kCols = rows_per_block(ND);
  // Rows before j - first + 1 don't see key j; a group starts at its first key's first row (its
  // later keys' weights there are zero).
  const auto first_row = [&](int64_t j) { return std::max<int64_t>(0, j - vis.first + 1); };
  int64_t j = 0;
  for (; j + kCols <= vis.n; j += kCols) {
    columns_block<kCols, ND>(y + j * y_stride, y_stride, overwrite, p + j, first_row(j), nq, x,
                             x_stride, tail);
  }
  for (; j < vis.n; ++j) {
    columns_block<1, ND>(y + j * y_stride, y_stride, overwrite, p + j, first_row(j), nq, x,
                         x_stride, tail);
  }
}

void accumulate_columns(float* y, int64_t y_stride, bool overwrite, const float* p, int64_t nq,
                        const float* x, int64_t x_stride, int64_t hd, Visibility vis) {
  for_each_chunk(hd, [&]<int ND>(int64_t d0, __mmask16 tail) {
    accumulate_columns_nd<ND>(y + d0, y_stride, overwrite, p, nq, x + d0, x_stride, tail, vis);
  });
}

void row_dots(float* dots, const float* a, const float* b, int64_t stride, int64_t n, int64_t hd) {
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const int64_t rows = std::min<int64_t>(16, n - i0);
    __m512 part[16];
    for (int64_t i = 0; i < 16; ++i) {
      part[i] = _mm512_setzero_ps();
      if (i >= rows) continue;
      const float* a_i = a + (i0 + i) * stride;
      const float* b_i = b + (i0 + i) * stride;
      for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 m = first_lanes(hd - d);
        part[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a_i + d),
                                  _mm512_maskz_loadu_ps(m, b_i + d), part[i]);
      }
    }
    _mm512_mask_storeu_ps(dots + i0, first_lanes(rows), reduce16(part, add16));
  }
}

}  // namespace

const Kernels& attention_kernels() {
  static const Kernels k{transpose_tile,  copy_rows,          scores,
                         softmax_forward, finish_rows,        softmax_backward,
                         accumulate_rows, accumulate_columns, row_dots};
  return k;
}

}  // namespace fp8lm::cpu::avx512
