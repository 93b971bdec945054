#pragma once
// Sixteen-lane steps the AVX-512 casts share (fp8/quantize_avx512.cpp, fp8/nvfp4_avx512.cpp):
// the scalar codecs' bit arithmetic on whole registers. Include only from files compiled for
// AVX-512 (src/CMakeLists.txt).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "core/fp8_dtype.h"

namespace fp8lm::isa {

// Lanes holding data when `left` elements remain: all sixteen, the tail, or none (left <= 0).
inline __mmask16 live_lanes(int64_t left) {
  return left >= 16  ? __mmask16(0xffff)
         : left <= 0 ? __mmask16(0)
                     : static_cast<__mmask16>((1u << left) - 1u);
}

// The live lanes of x, zero elsewhere: a plain load where all sixteen are live (the masked
// form is slower on Zen 4, and the test is one a loop over whole chunks predicts).
inline __m512 load_live(__mmask16 live, const float* x) {
  return live == 0xffff ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(live, x);
}
// The same of sixteen BF16 values, their bits in one half-width register.
inline __m256i load_live(__mmask16 live, const bf16_t* x) {
  return live == 0xffff ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))
                        : _mm256_maskz_loadu_epi16(live, x);
}
// The live lanes of v stored to x, the others left: a plain store where all sixteen are live.
inline void store_live(__mmask16 live, float* x, __m512 v) {
  live == 0xffff ? _mm512_storeu_ps(x, v) : _mm512_mask_storeu_ps(x, live, v);
}

// A constant the compiler cannot see through. GCC rebuilds an integer broadcast it can see
// inside each loop iteration (an immediate move and a broadcast) rather than keep it in one
// of the 32 registers; an opaque one stays in a register, or is read from the stack as an
// operand.
template <class V>
V opaque(V v) {
  asm("" : "+v"(v));
  return v;
}
inline __m512i opaque_set1(uint32_t bits) {
  return opaque(_mm512_set1_epi32(static_cast<int>(bits)));
}

// The scalar codec's steps on sixteen lanes of scaled values' bits u: the code (sign
// included), the lanes that rounded past max (over) and the non-zero ones that flushed to zero
// (flush), live lanes only.
template <DType F>
struct Fp8Lanes {
  static constexpr Fp8Consts c = fp8_consts(F);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  const __m512i min_normal = _mm512_set1_epi32(static_cast<int>(c.min_normal_bits));
  const __m512 magic = _mm512_set1_ps(c.subnormal_magic);
  const __m512i magic_bits = _mm512_set1_epi32(static_cast<int>(c.magic_bits));
  // a - rebias + (half - 1) folded into one constant (mod 2^32, as the scalar codec wraps).
  const __m512i round_bias =
      _mm512_set1_epi32(static_cast<int>((1u << (c.man_shift - 1)) - 1u - c.rebias));
  // A non-zero magnitude flushes to zero exactly when it is at most half the smallest
  // subnormal (the tie goes to the even zero): (a - 1) < half_bits, unsigned, in one compare.
  const __m512i half_min_subnormal =
      _mm512_set1_epi32(static_cast<int>(std::bit_cast<uint32_t>(fp8_min_subnormal(F) / 2)));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i max_code = _mm512_set1_epi32(static_cast<int>(c.max_code));
  const __m512i overflow_code;
  const __m512i nan_code = _mm512_set1_epi32(static_cast<int>(c.nan_code));

  explicit Fp8Lanes(bool saturate)
      : overflow_code(
            _mm512_set1_epi32(static_cast<int>(saturate ? c.max_code : c.overflow_code))) {}

  __m512i encode(__m512i u, __mmask16 live, __mmask16* over, __mmask16* flush) const {
    const __m512i a = _mm512_and_si512(u, abs_mask);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(a, inf_bits);
    const __mmask16 is_sub = _mm512_cmplt_epu32_mask(a, min_normal);
    const __m512i sub_code = _mm512_sub_epi32(
        _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)), magic_bits);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, c.man_shift), one);
    const __m512i norm_code =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, round_bias), odd), c.man_shift);
    __m512i code = _mm512_mask_blend_epi32(is_sub, norm_code, sub_code);
    *over = _mm512_cmpgt_epu32_mask(code, max_code) & ~is_nan & live;
    *flush = _mm512_mask_cmplt_epu32_mask(live, _mm512_sub_epi32(a, one), half_min_subnormal);
    code = _mm512_mask_blend_epi32(*over, code, overflow_code);
    code = _mm512_mask_blend_epi32(is_nan, code, nan_code);
    // code | ((u >> 24) & 0x80): the sign joins in one ternary-logic op.
    return _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80), 0xf8);
  }
};

// The decoded values of sixteen FP8 codes, exactly: both formats widen through FP16, which
// holds each of their values: an E5M2 code is the top byte of the FP16 with its value; an
// E4M3 code's exponent and mantissa, moved to FP16's positions, read 2^8 too small (bias 15
// instead of 7), for normals and subnormals alike, and its NaN codes (S.1111.111) read as
// ±480. NaN codes of both become the table's NaN (the default NaN with the code's sign; FP16
// would keep E5M2's payload).
inline __m512 decode_fp8_lanes(__m128i c8, bool e4m3) {
  const __m256i c16 = _mm256_cvtepu8_epi16(c8);
  const __m256i mag = _mm256_and_si256(c16, _mm256_set1_epi16(0x7f));
  __m512 v;
  __mmask16 nan_code;
  if (!e4m3) {
    v = _mm512_cvtph_ps(_mm256_slli_epi16(c16, 8));
    nan_code = _mm256_cmpgt_epi16_mask(mag, _mm256_set1_epi16(0x7c));
  } else {
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(c16, _mm256_set1_epi16(0x80)), 8);
    v = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7))),
                      _mm512_set1_ps(256.0f));
    nan_code = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
  }
  return _mm512_mask_or_ps(v, nan_code, _mm512_and_ps(v, _mm512_set1_ps(-0.0f)),
                           _mm512_set1_ps(std::nanf("")));
}

// The high 16 bits of each lane, packed in lane order: one word permute, where narrowing the
// shifted lanes (vpmovdw) is a shift and two instructions on Zen 4.
inline __m256i high_halves(__m512i v) {
  const __m512i odd_words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 29,
                                             27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(odd_words, v));
}

// bf16_from_float of each lane in the lane's high half (the low half is left over): the
// integer rounding u + 0x7fff + (u's BF16 lsb), or for NaN u with the quiet bit set, as a lane
// select (vcvtneps2bf16 would need AVX512-BF16 and flushes subnormals). NaN lanes may wrap
// around in the add; they are replaced.
inline __m512i bf16_in_high_halves(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return _mm512_mask_or_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), u,
                              _mm512_set1_epi32(0x00400000));
}

// bf16_from_float of sixteen lanes, packed.
inline __m256i rounded_bf16(__m512 v) {
  return high_halves(bf16_in_high_halves(v));
}

// Sixteen BF16 values to the live lanes of out: a plain store where all are live (the
// narrowing kept in registers: its masked memory form is slow).
inline void store_bf16_lanes(bf16_t* out, __m256i b, __mmask16 live) {
  if (live == 0xffff) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), b);
  } else {
    _mm256_mask_storeu_epi16(out, live, b);
  }
}

// bf16_from_float of v's lanes to the live lanes of out.
inline void store_bf16(bf16_t* out, __m512 v, __mmask16 live) {
  store_bf16_lanes(out, rounded_bf16(v), live);
}

// store_bf16 where every lane of v is known to be a BF16 value (at most eight significant bits,
// normal or zero, or Inf or the default NaN): its top half, which is what rounding gives.
inline void store_exact_bf16(bf16_t* out, __m512 v, __mmask16 live) {
  store_bf16_lanes(out, high_halves(_mm512_castps_si512(v)), live);
}

// store_exact_bf16 of a and b, 32 values, to out: their top halves gathered by one word
// permute of the two registers into one store.
inline void store_exact_bf16_pair(bf16_t* out, __m512 a, __m512 b) {
  const __m512i odd_words =
      _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  _mm512_storeu_si512(
      out, _mm512_permutex2var_epi16(_mm512_castps_si512(a), odd_words, _mm512_castps_si512(b)));
}

// The smallest power-of-two scale s for which every non-zero product of one of F's values (at
// most 4 significant bits) and s is a normal float, and so a BF16 value that store_exact_bf16
// may store: the smallest subnormal times s at least 2^-126. MXFP8's and Float8BlockScaling's
// scales are powers of two (check_block_cast).
template <DType F>
constexpr float min_exact_bf16_scale() {
  return 0x1p-126f / fp8_min_subnormal(F);
}

// Whether every live lane's power-of-two scale in s is at least min_exact_bf16_scale.
template <DType F>
inline bool bf16_holds_products(__m512 s, __mmask16 live) {
  return _mm512_mask_cmp_ps_mask(live, s, _mm512_set1_ps(min_exact_bf16_scale<F>()), _CMP_GE_OQ) ==
         live;
}

// Lane j of the result: the maximum of v[j]'s lanes. A butterfly of pairwise maxima over
// halves, quarters, then lanes within quarters; v must hold no NaN (a maximum is exact in any
// order only then), which |x| maxed with zero ensures. The last permute undoes the 4x4
// transposition the in-quarter steps leave (lane 4i + j holds v[4j + i]).
[[gnu::always_inline]] inline __m512 max_of_each(__m512 (&v)[16]) {
  __m512 h[8], q[4], p[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    h[i] = _mm512_max_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    q[i] = _mm512_max_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xdd));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
    p[i] = _mm512_max_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0xee));
  const __m512 m =
      _mm512_max_ps(_mm512_shuffle_ps(p[0], p[1], 0x88), _mm512_shuffle_ps(p[0], p[1], 0xdd));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), m);
}

// Sixteen blocks' scale codes to the live lanes of scales: E8M0 or E4M3 bytes, or the bits of
// Float8BlockScaling's FP32 scale_inv.
inline void store_scale_codes(uint8_t* scales, __m512i code, __mmask16 live) {
  _mm512_mask_cvtepi32_storeu_epi8(scales, live, code);
}
inline void store_scale_codes(float* scales, __m512i code, __mmask16 live) {
  _mm512_mask_storeu_ps(scales, live, _mm512_castsi512_ps(code));
}

// Up to sixteen blocks' scales from a[j], block j's |x| maxima still to be maxed across lanes:
// rule.apply(amax, &codes, &b, &multipliers) on their amaxes (max_of_each), the nb scale codes
// stored to scales, then each(j, multiplier, b) for each block j < nb.
template <class Scale, class Rule, class Each>
[[gnu::always_inline]] inline void scale_sixteen_blocks(__m512 (&a)[16], int64_t nb, Scale* scales,
                                                        const Rule& rule, Each each) {
  __m512i code;
  __m512 b, mult;
  rule.apply(max_of_each(a), &code, &b, &mult);
  store_scale_codes(scales, code, live_lanes(nb));
  alignas(64) float bs[16], ms[16];
  _mm512_store_ps(bs, b);
  _mm512_store_ps(ms, mult);
  for (int64_t j = 0; j < nb; ++j) each(j, _mm512_set1_ps(ms[j]), _mm512_set1_ps(bs[j]));
}

// A row of 1 x (16 Regs) blocks, sixteen blocks at a time: their amaxes (|x| maxed over each
// block's registers, max(|x|, acc) keeping acc where x is NaN) in one register for
// rule.apply(amax, &codes, &b, &multipliers), the scale codes stored to scales[block], then
// cast(first column, live lanes, multiplier, b) for each run of sixteen values of each block.
template <int Regs, class Scale, class Rule, class Cast>
void cast_row_blocks(const float* row, int64_t cols, Scale* scales, const Rule& rule, Cast cast) {
  constexpr int64_t kBlock = 16 * Regs;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int64_t nb = std::min<int64_t>(16, blocks - b0);
    // Sixteen whole blocks (most of a row) load and cast with every lane live, known to the
    // compiler: plain loads, and stores from registers (the masked forms are slower).
    const bool whole = (b0 + 16) * kBlock <= cols;
    const auto live_at = [&](int64_t c0) {
      return whole ? __mmask16(0xffff) : live_lanes(cols - c0);
    };
    __m512 a[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {  // blocks past the row's end load no lanes
      a[j] = _mm512_setzero_ps();
#pragma GCC unroll 2
      for (int h = 0; h < Regs; ++h) {
        const int64_t c0 = (b0 + j) * kBlock + 16 * h;
        a[j] = _mm512_max_ps(_mm512_abs_ps(load_live(live_at(c0), row + c0)), a[j]);
      }
    }
    scale_sixteen_blocks(a, nb, scales + b0, rule, [&](int64_t j, __m512 m, __m512 bj) {
      for (int64_t h = 0; h < Regs; ++h) {
        const int64_t c0 = (b0 + j) * kBlock + 16 * h;
        if (whole) {
          cast(c0, __mmask16(0xffff), m, bj);
          continue;
        }
        const __mmask16 live = live_lanes(cols - c0);
        if (!live) break;
        cast(c0, live, m, bj);
      }
    });
  }
}

// rows x cols values in 1 x (16 Regs) blocks, row-major, their scale codes at scales[row * blocks
// per row + block]: cast_row_blocks on each row, cast(i, live, multiplier, b) given the index of
// the run's first value in x. Where the blocks fill their rows the stripe's blocks lie end to end
// in x and in scales, so it is cast as one row: sixteen blocks a batch even where a row holds
// fewer (MXFP8's 8 at 256 columns), the batch's scale arithmetic shared.
template <int Regs, class Scale, class Rule, class Cast>
void cast_rows_of_blocks(const float* x, int64_t rows, int64_t cols, Scale* scales,
                         const Rule& rule, Cast cast) {
  constexpr int64_t kBlock = 16 * Regs;
  if (cols % kBlock == 0) {
    cast_row_blocks<Regs>(x, rows * cols, scales, rule, cast);
    return;
  }
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    cast_row_blocks<Regs>(
        x + r * cols, cols, scales + r * blocks, rule,
        [&](int64_t c0, __mmask16 live, __m512 m, __m512 b) { cast(r * cols + c0, live, m, b); });
  }
}

// The FP8 encoder's rounding kept in the float domain (fp8_round_to_bf16): the value of the
// saturating code of sixteen lanes of bits u. The magnitude is first clamped to the largest
// value (saturation, Inf included: rounding is monotone and the largest value is a code's, so
// clamping first gives what rounding then clamping does), then rounded to nearest even at the
// spacing of its binade (the subnormal spacing below the smallest normal) by adding and
// removing 2^(exponent + man_shift): the sum's ulp is that spacing, and removing it is exact.
// This is the twin's integer rounding of the dropped mantissa bits (and its magic number for
// subnormals) in ten operations. NaN becomes the table's NaN; the sign is put back.
template <DType F>
struct Fp8RoundLanes {
  static constexpr Fp8Consts c = fp8_consts(F);
  const __m512i abs_mask = opaque_set1(0x7fffffff), inf_bits = opaque_set1(0x7f800000);
  const __m512i min_normal = opaque_set1(c.min_normal_bits);
  const __m512i spacing_shift = opaque_set1(static_cast<uint32_t>(c.man_shift) << 23);
  const __m512 max_value = opaque(_mm512_set1_ps(fp8_max(F)));
  const __m512i quiet_nan = opaque_set1(0x7fc00000), sign = opaque_set1(0x80000000u);

  __m512 value(__m512i u) const {
    const __m512i a = _mm512_and_si512(u, abs_mask);
    return value(u, a, _mm512_cmpgt_epu32_mask(a, inf_bits));
  }

  // value(u) given u's magnitude bits a and its NaN lanes.
  __m512 value(__m512i u, __m512i a, __mmask16 nan) const {
    // minps returns its second operand for a NaN a; the NaN lanes are replaced below.
    const __m512 clamped = _mm512_min_ps(_mm512_castsi512_ps(a), max_value);
    const __m512i binade =
        _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(clamped), inf_bits), min_normal);
    const __m512 magic = _mm512_castsi512_ps(_mm512_add_epi32(binade, spacing_shift));
    __m512i r = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(clamped, magic), magic));
    r = _mm512_mask_blend_epi32(nan, r, quiet_nan);
    // r | (u & sign): one ternary-logic op.
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(r, u, sign, 0xf8));
  }
};

// The scalar E2M1 encoders' boundary counts (core/e2m1.h) on sixteen lanes of v: nearest even,
// or with an sr key stochastically, lane j drawing counter_bits(*sr_key, index + j).
struct E2m1Lanes {
  const uint32_t* sr_key;
  const __m512i one = opaque_set1(1), seven = opaque_set1(7);
  const __m512 lo_table = _mm512_loadu_ps(kE2M1Values.data());  // codes 0-7 are the magnitudes
  const __m512 inv_step = _mm512_castps256_ps512(_mm256_loadu_ps(kE2M1InverseStep.data()));
  const __m512i iota_step = opaque(
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(kCounterStep))));
  // value()'s and the draws' bit patterns: |x|, 6, 1, the sign, fmix32's multipliers, 2^-24,
  // the exponent field, the rounding spacing's 22 << 23, the exponent arithmetic's 287 << 23
  // and 1 << 23, a draw's top 24 bits.
  const __m512i abs_mask = opaque_set1(0x7fffffff), six = opaque_set1(0x40c00000),
                one_bits = opaque_set1(0x3f800000), sign = opaque_set1(0x80000000u),
                fmix1 = opaque_set1(kFmixMul1), fmix2 = opaque_set1(kFmixMul2),
                u_scale = opaque_set1(0x33800000), inf_bits = opaque_set1(0x7f800000),
                spacing_shift = opaque_set1(22u << 23), inverse_sum = opaque_set1(287u << 23),
                one_exponent = opaque_set1(1u << 23), top24 = opaque_set1(0xffffff00u);

  explicit E2m1Lanes(const uint32_t* key) : sr_key(key) {}

  // Each lane j's counter for the hash, (index + j) * kCounterStep + *sr_key: a run of values
  // advances it by adds (advance) instead of making it again for each sixteen.
  __m512i counter(uint32_t index) const {
    return _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(index * kCounterStep + *sr_key)),
                            iota_step);
  }
  // What advances a counter `ahead` indices (mod 2^32, as the hash's index arithmetic wraps).
  static __m512i advance(int64_t ahead) {
    return _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(ahead) * kCounterStep));
  }

  __m512i encode(__m512 v, uint32_t index) const {
    return encode_counted(v, sr_key ? counter(index) : _mm512_setzero_si512());
  }
  // encode with the lanes' counters given (read only with an sr key).
  __m512i encode_counted(__m512 v, __m512i counter) const {
    const __m512 a = _mm512_abs_ps(v);
    __m512i m = _mm512_setzero_si512();
    const auto count = [&](float bound, auto predicate) {
      m = _mm512_mask_add_epi32(
          m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(bound), decltype(predicate)::value), m, one);
    };
    if (!sr_key) {
      count(0.25f, std::integral_constant<int, _CMP_GT_OQ>{});
      count(0.75f, std::integral_constant<int, _CMP_GE_OQ>{});
      count(1.25f, std::integral_constant<int, _CMP_GT_OQ>{});
      count(1.75f, std::integral_constant<int, _CMP_GE_OQ>{});
      count(2.5f, std::integral_constant<int, _CMP_GT_OQ>{});
      count(3.5f, std::integral_constant<int, _CMP_GE_OQ>{});
      count(5.0f, std::integral_constant<int, _CMP_GT_OQ>{});
    } else {
      for (const float bound : {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f})
        count(bound, std::integral_constant<int, _CMP_GE_OQ>{});
      const __m512 p = _mm512_mul_ps(_mm512_sub_ps(a, _mm512_permutexvar_ps(m, lo_table)),
                                     _mm512_permutexvar_ps(m, inv_step));
      m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(draw(counter), p, _CMP_LT_OQ), m, one);
      m = _mm512_min_epi32(m, seven);
    }
    m = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), m, seven);
    const __m512i sign_code =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 28), _mm512_set1_epi32(8));
    return _mm512_or_si512(m, sign_code);
  }

  // kE2M1Values[encode_counted(v, counter)], found in the float domain without the code, and the
  // sign put back. The magnitude is clamped to 6 first (Inf too; minps gives 6 for NaN, as the
  // twin's bits above 6's do), then, nearest even, rounded at its binade's spacing (1/2 below 1)
  // by adding and removing 2^(exponent + 22): Fp8RoundLanes' way. Stochastic: the clamped c is
  // truncated to lo, the grid value at or below it, the same way rounding toward zero, then
  // stepped up where the draw is below p = (c - lo) / step (encode's u and p, both scaled by
  // 2^32: exact). From 6 on every draw gives 6, so the clamp changes no result, and nothing
  // steps past 6. Stochastic says which (whether sr_key is set; the counters are read only
  // then), known to the compiler, so that a loop over values tests nothing.
  template <bool Stochastic>
  __m512 value_counted(__m512 v, __m512i counter) const {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512 clamped = _mm512_min_ps(_mm512_castsi512_ps(_mm512_and_si512(bits, abs_mask)),
                                         _mm512_castsi512_ps(six));
    // 2^e, the clamped magnitude's binade, at least 1: the grid's spacing there is 2^(e - 1).
    const __m512i binade =
        _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(clamped), inf_bits), one_bits);
    const __m512 magic = _mm512_castsi512_ps(_mm512_add_epi32(binade, spacing_shift));
    __m512i r;
    if constexpr (!Stochastic) {
      r = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(clamped, magic), magic));
    } else {
      const __m512 lo = _mm512_sub_ps(
          _mm512_add_round_ps(clamped, magic, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), magic);
      // 2^32 / step = 2^(33 - e), and step = 2^(e - 1): exponent arithmetic on the binade.
      const __m512 inverse = _mm512_castsi512_ps(_mm512_sub_epi32(inverse_sum, binade));
      const __m512 step = _mm512_castsi512_ps(_mm512_sub_epi32(binade, one_exponent));
      const __m512 p = _mm512_mul_ps(_mm512_sub_ps(clamped, lo), inverse);
      r = _mm512_castps_si512(_mm512_mask_add_ps(
          lo, _mm512_cmp_ps_mask(scaled_draw(counter), p, _CMP_LT_OQ), lo, step));
    }
    // r | (bits & sign): one ternary-logic op.
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(r, bits, sign, 0xf8));
  }

  // counter_bits(*sr_key, index + j) of each lane j, given its counter (index + j) * step + key
  // (counter(): the product distributed mod 2^32, so that only j * step is a vector multiply,
  // made once), but for fmix32's last step, h ^= h >> 16, which the draws fold into what they
  // do next.
  __m512i unfinished_hash(__m512i counter) const {
    __m512i h = _mm512_xor_si512(counter, _mm512_srli_epi32(counter, 16));
    h = _mm512_mullo_epi32(h, fmix1);
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
    return _mm512_mullo_epi32(h, fmix2);
  }

  // u in [0, 1) of each lane's 32 random bits: their top 24, times 2^-24.
  __m512 draw(__m512i counter) const {
    const __m512i h = unfinished_hash(counter);
    return _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_xor_si512(h, _mm512_srli_epi32(h, 16)), 8)),
        _mm512_castsi512_ps(u_scale));
  }

  // u times 2^32: the top 24 bits in place, exact in FP32; the last xor and the mask one
  // ternary-logic op, (h ^ (h >> 16)) & top24.
  __m512 scaled_draw(__m512i counter) const {
    const __m512i h = unfinished_hash(counter);
    return _mm512_cvtepu32_ps(_mm512_ternarylogic_epi32(h, _mm512_srli_epi32(h, 16), top24, 0x28));
  }
};

}  // namespace fp8lm::isa
