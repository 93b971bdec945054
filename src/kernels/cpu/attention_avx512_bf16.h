#pragma once
// The AVX-512 BF16 attention kernel set (attention_isa.h's Bf16Kernels), written once over how a
// pair product is made (Dot): attention_avx512_bf16.cpp makes it with VDPBF16PS, where that
// instruction is faster than FP32 FMAs (AMD Zen 4), and attention_avx512_bf16_fma.cpp with two
// FMAs on the pair's halves, where it is not (Intel Sapphire Rapids runs it at half the FMA
// rate) or where the CPU lacks it. Included only by those two files (built with AVX-512 flags).
//
// A Dot provides: Wide broadcast(uint32_t pair) (one pair in every lane), Vec load(p) and
// load(p, tail) (16 pairs, the second masked), and __m512 dot(acc, Wide, Vec): acc + the pair
// products in attention_tiles::dot2's order, rounding and flushing, so every output element is
// the same chain of dot2 steps however rows are grouped into register blocks (a group's rows or
// keys that see fewer pairs take theirs one by one) and both sets give the generic set's bits.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "fp8/lanes_avx512.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/attention_isa.h"

namespace fp8lm::cpu::avx512::bf16_tiles {
// Each including file keeps its own copies: the two are built for different instruction sets
// (pairs() below takes AVX512-BF16's conversion where the build has it), and one definition
// shared between them, whichever the linker kept, could run an instruction the CPU lacks.
namespace {

using attention_tiles::Bf16Kernels;
using attention_tiles::kKeyTile;
using attention_tiles::Visibility;
using namespace attention_regs;  // NOLINT: the register helpers this file is written in

// BF16 bits in each lane's low 16 bits with a subnormal flushed to a zero of its sign (the
// instruction reads subnormal inputs as zero).
inline __m512i flushed(__m512i b) {
  const __mmask16 subnormal = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f80));
  return _mm512_mask_and_epi32(b, subnormal, b, _mm512_set1_epi32(0x8000));
}

// bf16_from_float's bits of each lane in its low 16 bits, a subnormal flushed to a zero of its
// sign (the instruction reads subnormal inputs as zero), NaN kept quiet.
inline __m512i bf16_bits(__m512 x) {
  return flushed(_mm512_srli_epi32(isa::bf16_in_high_halves(x), 16));
}

// The same of sixteen BF16 values' bits: what bf16_bits gives on their FP32 widening (a NaN
// made quiet, a subnormal flushed), without the rounding.
inline __m512i bf16_bits(__m256i b16) {
  const __m512i b = _mm512_cvtepu16_epi32(b16);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7fff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f80));
  return flushed(_mm512_mask_or_epi32(b, nan, b, _mm512_set1_epi32(0x0040)));
}

// The BF16 bits of the lanes of x under mask (zero elsewhere), from FP32 or BF16 values: plain
// loads where every lane is live (the masked forms are slower on Zen 4).
inline __m512i bits_at(const float* x, __mmask16 lanes) {
  return bf16_bits(isa::load_live(lanes, x));
}
inline __m512i bits_at(const bf16_t* x, __mmask16 lanes) {
  return bf16_bits(isa::load_live(lanes, x));
}

// Lane-wise pairs (lo[i], hi[i]) of BF16 bits.
inline __m512i pair_bits(__m512i lo, __m512i hi) {
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// Lane-wise pairs (lo[i], hi[i]) of bf16_bits. With AVX512-BF16 (the VDPBF16PS set's build)
// VCVTNE2PS2BF16 rounds both to nearest even and quiets a NaN as bf16_from_float does; it reads
// a subnormal as a zero of its sign, which is bf16_bits' flush except where rounding would carry
// a subnormal up to the smallest normal, so vectors with a subnormal lane take the integer
// rounding. The rounded halves come back as [lo, hi]; one word permutation interleaves them.
inline __m512i pairs(__m512 lo, __m512 hi) {
#ifdef __AVX512BF16__
  constexpr int kDenormal = 0x20;  // VFPCLASSPS's category
  if ((_mm512_fpclass_ps_mask(lo, kDenormal) | _mm512_fpclass_ps_mask(hi, kDenormal)) == 0) {
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(interleave,
                                    std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
#endif
  return pair_bits(bf16_bits(lo), bf16_bits(hi));
}

// Pairs (lo[i], hi[i]) of the live lanes of two runs of values (zero elsewhere).
inline __m512i pairs_at(const float* lo, __mmask16 lo_lanes, const float* hi, __mmask16 hi_lanes) {
  return pairs(isa::load_live(lo_lanes, lo), isa::load_live(hi_lanes, hi));
}
inline __m512i pairs_at(const bf16_t* lo, __mmask16 lo_lanes, const bf16_t* hi,
                        __mmask16 hi_lanes) {
  return pair_bits(bits_at(lo, lo_lanes), bits_at(hi, hi_lanes));
}

// Pairs i0..i0+15 of a row's half pairs (x[i], x[i + h]), masked to the h pairs and hd values.
template <class Src>
inline __m512i half_pairs_at(const Src* x, int64_t i0, int64_t h, int64_t hd) {
  return pairs_at(x + i0, first_lanes(h - i0), x + h + i0, first_lanes(hd - h - i0));
}

template <class Src>
void pack_half_pairs(uint32_t* dst, int64_t dst_stride, const Src* src, int64_t src_stride,
                     int64_t n, int64_t hd) {
  const int64_t h = attention_tiles::half_pairs(hd);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i0 = 0; i0 < h; i0 += 16) {
      _mm512_mask_storeu_epi32(dst + r * dst_stride + i0, first_lanes(h - i0),
                               half_pairs_at(src + r * src_stride, i0, h, hd));
    }
  }
}

template <class Src>
void pack_tile_pairs(uint32_t* dst, const Src* rows, int64_t stride, int64_t n, int64_t hd) {
  const int64_t h = attention_tiles::half_pairs(hd);
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    for (int64_t i0 = 0; i0 < h; i0 += 16) {
      __m512 a[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        a[i] = j0 + i < n ? _mm512_castsi512_ps(half_pairs_at(rows + (j0 + i) * stride, i0, h, hd))
                          : _mm512_setzero_ps();
      }
      transpose16(a);  // 32-bit lanes: the pairs move whole
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        if (i0 + i < h)
          _mm512_storeu_ps(reinterpret_cast<float*>(dst + (i0 + i) * kKeyTile + j0), a[i]);
    }
  }
}

template <class Src>
void pack_row_pairs(uint32_t* dst, int64_t dst_stride, const Src* src, int64_t src_stride,
                    int64_t n, int64_t hd) {
  for (int64_t m = 0; 2 * m < n; ++m) {
    const Src* a = src + 2 * m * src_stride;
    const bool odd = 2 * m + 1 < n;
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 lanes = first_lanes(hd - d);
      _mm512_mask_storeu_epi32(dst + m * dst_stride + d, lanes,
                               pairs_at(a + d, lanes, a + src_stride + d, odd ? lanes : 0));
    }
  }
}

inline void pack_weight_rows(uint32_t* dst, const float* p, int64_t nq, Visibility vis) {
  // Even and odd entries of 32 consecutive weights.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const int64_t pairs_in_tile = (vis.n + 1) / 2;
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t n = vis.visible(r);
    const float* w = p + r * kKeyTile;
    for (int64_t j = 0; j < 2 * pairs_in_tile; j += 32) {
      const __m512 a = _mm512_maskz_loadu_ps(first_lanes(n - j), w + j);
      const __m512 b = _mm512_maskz_loadu_ps(first_lanes(n - j - 16), w + j + 16);
      _mm512_mask_storeu_epi32(
          dst + r * (kKeyTile / 2) + j / 2, first_lanes(pairs_in_tile - j / 2),
          pairs(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b)));
    }
  }
}

inline void pack_weight_pairs(uint32_t* dst, const float* p, int64_t nq, Visibility vis) {
  for (int64_t m = 0; 2 * m < nq; ++m) {
    const float* a = p + 2 * m * kKeyTile;
    const bool odd = 2 * m + 1 < nq;
    for (int64_t j = 0; j < vis.n; j += 16) {
      const __m512 hi = odd ? _mm512_loadu_ps(a + kKeyTile + j) : _mm512_setzero_ps();
      _mm512_storeu_si512(dst + m * kKeyTile + j, pairs(_mm512_loadu_ps(a + j), hi));
    }
  }
}

// R rows x NV vectors of 16 keys, as the FP32 set's scores_block, a pair per step.
template <class Dot, int R, int NV>
void scores_block(float* s, const uint32_t* x, int64_t x_stride, const uint32_t* tile, int64_t h,
                  float scale) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < h; ++i) {
    typename Dot::Vec column[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) column[v] = Dot::load(tile + i * kKeyTile + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const typename Dot::Wide xr = Dot::broadcast(x[r * x_stride + i]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = Dot::dot(acc[r][v], xr, column[v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(s + r * kKeyTile + 16 * v, _mm512_mul_ps(acc[r][v], sc));
}

template <class Dot, int R>
void scores_rows(float* s, const uint32_t* x, int64_t x_stride, int64_t nv, const uint32_t* tile,
                 int64_t h, float scale) {
  with_key_vectors(nv, [&]<int NV>() { scores_block<Dot, R, NV>(s, x, x_stride, tile, h, scale); });
}

template <class Dot>
void scores(float* s, const uint32_t* x, int64_t x_stride, int64_t nq, const uint32_t* tile,
            int64_t hd, float scale, Visibility vis) {
  static_assert(kKeyTile == 64, "scores_rows covers at most 4 vectors of keys");
  constexpr int64_t kRows = 6;
  const int64_t h = attention_tiles::half_pairs(hd);
  int64_t r = 0;
  for (; r + kRows <= nq; r += kRows) {
    scores_rows<Dot, kRows>(s + r * kKeyTile, x + r * x_stride, x_stride,
                            vectors(vis.visible(r + kRows - 1)), tile, h, scale);
  }
  for (; r < nq; ++r)
    scores_rows<Dot, 1>(s + r * kKeyTile, x + r * x_stride, x_stride, vectors(vis.visible(r)), tile,
                        h, scale);
}

// One step of a weighted sum: ND vectors of a row pair, weighted by the pair w.
template <class Dot, int ND>
void add_pair(__m512 (&acc)[ND], uint32_t w, const uint32_t* x, __mmask16 tail) {
  const typename Dot::Wide wv = Dot::broadcast(w);
#pragma GCC unroll 16
  for (int k = 0; k < ND; ++k) {
    const typename Dot::Vec xk = k < ND - 1 ? Dot::load(x + 16 * k) : Dot::load(x + 16 * k, tail);
    acc[k] = Dot::dot(acc[k], wv, xk);
  }
}

// R rows of y, ND vectors each; row r takes key pairs [0, pairs of its visible keys). Pairs all
// rows of the group take go through the register block, the diagonal's row by row.
template <class Dot, int R, int ND>
void rows_block(float* y, int64_t y_stride, const float* alpha, bool overwrite, const uint32_t* p,
                const uint32_t* x, int64_t x_stride, __mmask16 tail, int64_t first_pairs,
                Visibility vis, int64_t r0) {
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
  for (int64_t m = 0; m < first_pairs; ++m) {
    typename Dot::Wide wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = Dot::broadcast(p[r * (kKeyTile / 2) + m]);
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) {
      const typename Dot::Vec xk = k < ND - 1 ? Dot::load(x + m * x_stride + 16 * k)
                                              : Dot::load(x + m * x_stride + 16 * k, tail);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][k] = Dot::dot(acc[r][k], wv[r], xk);
    }
  }
#pragma GCC unroll 16
  for (int r = 1; r < R; ++r) {
    const int64_t own = (vis.visible(r0 + r) + 1) / 2;
    for (int64_t m = first_pairs; m < own; ++m)
      add_pair<Dot, ND>(acc[r], p[r * (kKeyTile / 2) + m], x + m * x_stride, tail);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) store_part<ND>(y + r * y_stride, k, tail, acc[r][k]);
}

template <class Dot, int ND>
void accumulate_rows_nd(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                        const uint32_t* p, int64_t nq, const uint32_t* x, int64_t x_stride,
                        __mmask16 tail, Visibility vis) {
  constexpr int kRows = rows_per_block(ND);
  int64_t r = 0;
  for (; r + kRows <= nq; r += kRows) {
    rows_block<Dot, kRows, ND>(y + r * y_stride, y_stride, alpha ? alpha + r : nullptr, overwrite,
                               p + r * (kKeyTile / 2), x, x_stride, tail, (vis.visible(r) + 1) / 2,
                               vis, r);
  }
  for (; r < nq; ++r) {
    rows_block<Dot, 1, ND>(y + r * y_stride, y_stride, alpha ? alpha + r : nullptr, overwrite,
                           p + r * (kKeyTile / 2), x, x_stride, tail, (vis.visible(r) + 1) / 2, vis,
                           r);
  }
}

template <class Dot>
void accumulate_rows(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                     const uint32_t* p, int64_t nq, const uint32_t* x, int64_t x_stride, int64_t hd,
                     Visibility vis) {
  for_each_chunk(hd, [&]<int ND>(int64_t d0, __mmask16 tail) {
    accumulate_rows_nd<Dot, ND>(y + d0, y_stride, alpha, overwrite, p, nq, x + d0, x_stride, tail,
                                vis);
  });
}

// R consecutive keys of y from key j, ND vectors each. Key c starts at query pair start(c),
// which grows with c: the pairs before the group's last start are taken key by key, the rest
// through the register block.
template <class Dot, int R, int ND>
void columns_block(float* y, int64_t y_stride, bool overwrite, const uint32_t* p, int64_t j,
                   int64_t pair_count, const uint32_t* x, int64_t x_stride, __mmask16 tail,
                   Visibility vis) {
  const auto start = [&](int64_t key) { return std::max<int64_t>(0, key - vis.first + 1) / 2; };
  __m512 acc[R][ND];
#pragma GCC unroll 16
  for (int c = 0; c < R; ++c) {
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k)
      acc[c][k] = overwrite ? _mm512_setzero_ps() : load_part<ND>(y + c * y_stride, k, tail);
  }
  const int64_t common = std::min(start(j + R - 1), pair_count);
#pragma GCC unroll 16
  for (int c = 0; c < R - 1; ++c) {
    for (int64_t m = start(j + c); m < common; ++m)
      add_pair<Dot, ND>(acc[c], p[m * kKeyTile + j + c], x + m * x_stride, tail);
  }
  for (int64_t m = common; m < pair_count; ++m) {
    typename Dot::Wide wv[R];
#pragma GCC unroll 16
    for (int c = 0; c < R; ++c) wv[c] = Dot::broadcast(p[m * kKeyTile + j + c]);
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) {
      const typename Dot::Vec xk = k < ND - 1 ? Dot::load(x + m * x_stride + 16 * k)
                                              : Dot::load(x + m * x_stride + 16 * k, tail);
#pragma GCC unroll 16
      for (int c = 0; c < R; ++c) acc[c][k] = Dot::dot(acc[c][k], wv[c], xk);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < R; ++c)
#pragma GCC unroll 16
    for (int k = 0; k < ND; ++k) store_part<ND>(y + c * y_stride, k, tail, acc[c][k]);
}

template <class Dot, int ND>
void accumulate_columns_nd(float* y, int64_t y_stride, bool overwrite, const uint32_t* p,
                           int64_t nq, const uint32_t* x, int64_t x_stride, __mmask16 tail,
                           Visibility vis) {
  constexpr int kCols = rows_per_block(ND);
  const int64_t pair_count = (nq + 1) / 2;
  int64_t j = 0;
  for (; j + kCols <= vis.n; j += kCols) {
    columns_block<Dot, kCols, ND>(y + j * y_stride, y_stride, overwrite, p, j, pair_count, x,
                                  x_stride, tail, vis);
  }
  for (; j < vis.n; ++j)
    columns_block<Dot, 1, ND>(y + j * y_stride, y_stride, overwrite, p, j, pair_count, x, x_stride,
                              tail, vis);
}

template <class Dot>
void accumulate_columns(float* y, int64_t y_stride, bool overwrite, const uint32_t* p, int64_t nq,
                        const uint32_t* x, int64_t x_stride, int64_t hd, Visibility vis) {
  for_each_chunk(hd, [&]<int ND>(int64_t d0, __mmask16 tail) {
    accumulate_columns_nd<Dot, ND>(y + d0, y_stride, overwrite, p, nq, x + d0, x_stride, tail, vis);
  });
}

// The set with Dot's products; a Dot that needs work around them (the FMA set's flushing)
// wraps scores and the weighted sums instead.
template <class Dot>
Bf16Kernels kernels_with() {
  return Bf16Kernels{pack_half_pairs<float>,  pack_tile_pairs<float>,  pack_row_pairs<float>,
                     pack_half_pairs<bf16_t>, pack_tile_pairs<bf16_t>, pack_row_pairs<bf16_t>,
                     pack_weight_rows,        pack_weight_pairs,       scores<Dot>,
                     accumulate_rows<Dot>,    accumulate_columns<Dot>};
}

}  // namespace
}  // namespace fp8lm::cpu::avx512::bf16_tiles
