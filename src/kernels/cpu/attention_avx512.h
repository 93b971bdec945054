#pragma once
// Register-level helpers shared by the AVX-512 attention kernel sets (attention_avx512.cpp,
// attention_avx512_bf16.cpp); included only by files built with AVX-512 flags.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace fp8lm::cpu::avx512::attention_regs {

// Head-dimension values one kernel call keeps in registers; longer heads go in chunks.
constexpr int64_t kMaxChunk = 128;

inline int64_t vectors(int64_t n) {
  return (n + 15) / 16;
}

// Lanes [0, n) of a vector, n clamped to [0, 16].
inline __mmask16 first_lanes(int64_t n) {
  if (n >= 16) return 0xFFFF;
  if (n <= 0) return 0;
  return static_cast<__mmask16>((1u << n) - 1);
}

// The k-th of ND vectors of a row whose last vector holds only the lanes in tail: a masked load
// so nothing past the row is touched.
template <int ND>
inline __m512 load_part(const float* row, int k, __mmask16 tail) {
  return k < ND - 1 ? _mm512_loadu_ps(row + 16 * k) : _mm512_maskz_loadu_ps(tail, row + 16 * k);
}

template <int ND>
inline void store_part(float* row, int k, __mmask16 tail, __m512 v) {
  if (k < ND - 1) {
    _mm512_storeu_ps(row + 16 * k, v);
  } else {
    _mm512_mask_storeu_ps(row + 16 * k, tail, v);
  }
}

// In-register transpose of a 16 x 16 block: a[i] lane k becomes a[k] lane i.
inline void transpose16(__m512 (&a)[16]) {
  __m512 b[16];
  // Interleave row pairs: b[2i], b[2i+1] hold rows 2i, 2i+1 at columns 4L, 4L+1 (resp.
  // 4L+2, 4L+3) of each 128-bit lane L.
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    b[2 * i] = _mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]);
    b[2 * i + 1] = _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]);
  }
  // a[4i + m] lane L: rows 4i..4i+3 at column 4L + m.
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    a[4 * i] = _mm512_shuffle_ps(b[4 * i], b[4 * i + 2], 0x44);
    a[4 * i + 1] = _mm512_shuffle_ps(b[4 * i], b[4 * i + 2], 0xEE);
    a[4 * i + 2] = _mm512_shuffle_ps(b[4 * i + 1], b[4 * i + 3], 0x44);
    a[4 * i + 3] = _mm512_shuffle_ps(b[4 * i + 1], b[4 * i + 3], 0xEE);
  }
  // Column 4L + m gathers lane L of a[m], a[4 + m], a[8 + m], a[12 + m]: a 4 x 4 transpose of
  // 128-bit lanes, done in two rounds of lane shuffles.
#pragma GCC unroll 16
  for (int m = 0; m < 4; ++m) {
    const __m512 even01 = _mm512_shuffle_f32x4(a[m], a[4 + m], 0x88);
    const __m512 odd01 = _mm512_shuffle_f32x4(a[m], a[4 + m], 0xDD);
    const __m512 even23 = _mm512_shuffle_f32x4(a[8 + m], a[12 + m], 0x88);
    const __m512 odd23 = _mm512_shuffle_f32x4(a[8 + m], a[12 + m], 0xDD);
    b[m] = _mm512_shuffle_f32x4(even01, even23, 0x88);
    b[4 + m] = _mm512_shuffle_f32x4(odd01, odd23, 0x88);
    b[8 + m] = _mm512_shuffle_f32x4(even01, even23, 0xDD);
    b[12 + m] = _mm512_shuffle_f32x4(odd01, odd23, 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) a[i] = b[i];
}

// Rows per register block for ND vectors per row: about 16-24 accumulators, and a count that
// divides kKeyTile so full blocks leave no ragged group.
constexpr int rows_per_block(int nd) {
  return nd <= 2 ? 8 : nd <= 5 ? 4 : 2;
}

// Calls body.template operator()<ND>(d0, tail) for each chunk of at most kMaxChunk head values,
// ND being the chunk's vector count.
template <class Body>
void for_each_chunk(int64_t hd, Body body) {
  static_assert(kMaxChunk == 8 * 16, "the switch below covers up to 8 vectors");
  for (int64_t d0 = 0; d0 < hd; d0 += kMaxChunk) {
    const int64_t len = std::min(kMaxChunk, hd - d0);
    const int64_t nd = vectors(len);
    const __mmask16 tail = first_lanes(len - 16 * (nd - 1));
    switch (nd) {
      case 1:
        body.template operator()<1>(d0, tail);
        break;
      case 2:
        body.template operator()<2>(d0, tail);
        break;
      case 3:
        body.template operator()<3>(d0, tail);
        break;
      case 4:
        body.template operator()<4>(d0, tail);
        break;
      case 5:
        body.template operator()<5>(d0, tail);
        break;
      case 6:
        body.template operator()<6>(d0, tail);
        break;
      case 7:
        body.template operator()<7>(d0, tail);
        break;
      default:
        body.template operator()<8>(d0, tail);
        break;
    }
  }
}

// Calls body.template operator()<NV>() for nv vectors of keys, 1..4 (a 64-key tile's; more reads
// as 4): what a block of scores computes.
template <class Body>
void with_key_vectors(int64_t nv, Body body) {
  switch (nv) {
    case 1:
      return body.template operator()<1>();
    case 2:
      return body.template operator()<2>();
    case 3:
      return body.template operator()<3>();
    default:
      return body.template operator()<4>();
  }
}

}  // namespace fp8lm::cpu::avx512::attention_regs
