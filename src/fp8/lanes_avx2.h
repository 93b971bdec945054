#pragma once
// Eight-lane steps the AVX2 casts share (fp8/quantize_avx2.cpp, kernels/cpu/casts_avx2.cpp):
// the scalar codecs' bit arithmetic on whole registers, as lanes_avx512.h does on sixteen.
// Include only from files compiled for AVX2, FMA and F16C (src/CMakeLists.txt). The names
// live in their own namespace: lanes_avx512.h has the same steps under the same names.
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "core/fp8_dtype.h"

namespace fp8lm::isa::avx2 {

inline __m256i set1(uint32_t bits) {
  return _mm256_set1_epi32(static_cast<int>(bits));
}

// The low byte of each 32-bit lane, in the low 8 bytes.
inline __m128i pack_low_bytes(__m256i v) {
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i bytes = _mm256_shuffle_epi8(v, pick);
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
}

inline __m128i load8_bytes(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}
inline void store8_bytes(uint8_t* p, __m128i v) {
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), v);
}

// The scalar codec's steps on eight lanes of scaled values' bits u: the code (sign included),
// and as all-ones lanes those that rounded past max (over) and the non-zero ones that flushed
// to zero (flush). Signed compares are safe: magnitudes are at most 0x7fffffff, codes small.
template <DType F>
struct Fp8Lanes {
  static constexpr Fp8Consts c = fp8_consts(F);
  const __m256i abs_mask = set1(0x7fffffff), inf_bits = set1(0x7f800000);
  const __m256i min_normal_minus_one = set1(c.min_normal_bits - 1);
  const __m256 magic = _mm256_set1_ps(c.subnormal_magic);
  const __m256i magic_bits = set1(c.magic_bits);
  // a - rebias + (half - 1) folded into one constant (mod 2^32, as the scalar codec wraps).
  const __m256i round_bias = set1((1u << (c.man_shift - 1)) - 1u - c.rebias);
  // A non-zero magnitude flushes to zero exactly when it is at most half the smallest
  // subnormal (the tie goes to the even zero): 0 < a <= half_bits.
  const __m256i half_min_subnormal_plus_one =
      set1(std::bit_cast<uint32_t>(fp8_min_subnormal(F) / 2) + 1);
  const __m256i one = set1(1), max_code = set1(c.max_code), nan_code = set1(c.nan_code);
  const __m256i sign_bit = set1(0x80), zero = _mm256_setzero_si256();
  const __m256i overflow_code;

  explicit Fp8Lanes(bool saturate) : overflow_code(set1(saturate ? c.max_code : c.overflow_code)) {}

  __m256i encode(__m256i u, __m256i* over, __m256i* flush) const {
    const __m256i a = _mm256_and_si256(u, abs_mask);
    const __m256i is_nan = _mm256_cmpgt_epi32(a, inf_bits);
    const __m256i is_sub = _mm256_cmpgt_epi32(min_normal_minus_one, a);
    const __m256i sub_code = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), magic_bits);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, c.man_shift), one);
    const __m256i norm_code =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, round_bias), odd), c.man_shift);
    __m256i code = _mm256_blendv_epi8(norm_code, sub_code, is_sub);
    *over = _mm256_andnot_si256(is_nan, _mm256_cmpgt_epi32(code, max_code));
    *flush = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, zero),
                                 _mm256_cmpgt_epi32(half_min_subnormal_plus_one, a));
    code = _mm256_blendv_epi8(code, overflow_code, *over);
    code = _mm256_blendv_epi8(code, nan_code, is_nan);
    return _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(u, 24), sign_bit));
  }
};

// The decoded values of eight FP8 codes (the low 8 bytes of c8), exactly, through FP16 as
// lanes_avx512.h's decode_fp8_lanes does: an E5M2 code is the top byte of its FP16; an E4M3
// code's exponent and mantissa in FP16's places read 2^8 too small, and its NaN codes read as
// ±480. NaN codes of both become the table's NaN with the code's sign.
inline __m256 decode_fp8(__m128i c8, bool e4m3) {
  const __m128i c16 = _mm_cvtepu8_epi16(c8);
  const __m128i mag = _mm_and_si128(c16, _mm_set1_epi16(0x7f));
  __m256 v;
  __m128i nan_code;  // a magnitude is at most 0x7f: signed 16-bit compares are safe
  if (!e4m3) {
    v = _mm256_cvtph_ps(_mm_slli_epi16(c16, 8));
    nan_code = _mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7c));
  } else {
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(c16, _mm_set1_epi16(0x80)), 8);
    v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_or_si128(sign, _mm_slli_epi16(mag, 7))),
                      _mm256_set1_ps(256.0f));
    nan_code = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
  }
  const __m256 nan =
      _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(std::nanf("")));
  return _mm256_blendv_ps(v, nan, _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan_code)));
}

// bf16_from_float's integer rounding on eight lanes, packed to eight BF16s (each lane's
// result is at most 0xffff, so the unsigned-saturating pack keeps it).
inline __m128i round_to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i top = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(_mm256_and_si256(top, set1(1)), set1(0x7fff))), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, set1(0x7fffffff)), set1(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(top, set1(0x40)), nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// The top halves of eight floats: the BF16 of a value BF16 holds exactly.
inline __m128i exact_bf16(__m256 v) {
  const __m256i top = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
}

inline void store8_bf16(bf16_t* out, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
}

// The FP8 encoder's rounding kept in the float domain (fp8_round_to_bf16), as
// lanes_avx512.h's Fp8RoundLanes: the value of the saturating code of eight lanes of bits u.
template <DType F>
struct Fp8RoundLanes {
  static constexpr Fp8Consts c = fp8_consts(F);
  const __m256i abs_mask = set1(0x7fffffff), inf_bits = set1(0x7f800000);
  const __m256i min_normal = set1(c.min_normal_bits);
  const __m256i half_minus_one = set1((1u << (c.man_shift - 1)) - 1);
  const __m256i keep = set1(~((1u << c.man_shift) - 1));
  const __m256i max_bits = set1(std::bit_cast<uint32_t>(fp8_max(F)));
  const __m256i one = set1(1), quiet_nan = set1(0x7fc00000), sign = set1(0x80000000u);
  const __m256 magic = _mm256_set1_ps(c.subnormal_magic);

  __m256 value(__m256i u) const {
    const __m256i a = _mm256_and_si256(u, abs_mask);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, c.man_shift), one);
    __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(a, half_minus_one), odd), keep);
    r = _mm256_min_epu32(r, max_bits);
    const __m256 sub = _mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), magic), magic);
    r = _mm256_blendv_epi8(r, _mm256_castps_si256(sub), _mm256_cmpgt_epi32(min_normal, a));
    r = _mm256_blendv_epi8(r, quiet_nan, _mm256_cmpgt_epi32(a, inf_bits));
    return _mm256_castsi256_ps(_mm256_or_si256(r, _mm256_and_si256(u, sign)));
  }
};

// The scalar E2M1 encoders' boundary counts (core/e2m1.h) on eight lanes of v: nearest even,
// or with an sr key stochastically, lane j drawing counter_bits(*sr_key, index + j). A
// comparison gives -1 in a lane, so subtracting it counts.
struct E2m1Lanes {
  const uint32_t* sr_key;
  const __m256 abs_mask = _mm256_castsi256_ps(set1(0x7fffffff));
  const __m256i seven = set1(7);
  const __m256 lo_table = _mm256_loadu_ps(kE2M1Values.data());  // codes 0-7: the magnitudes
  const __m256 inv_step = _mm256_loadu_ps(kE2M1InverseStep.data());
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);

  explicit E2m1Lanes(const uint32_t* key) : sr_key(key) {}

  __m256i encode(__m256 v, uint32_t index) const {
    const __m256 a = _mm256_and_ps(v, abs_mask);
    __m256i m = _mm256_setzero_si256();
    const auto count = [&](float bound, auto predicate) {
      m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(bound),
                                                                decltype(predicate)::value)));
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
      const __m256 p = _mm256_mul_ps(_mm256_sub_ps(a, _mm256_permutevar8x32_ps(lo_table, m)),
                                     _mm256_permutevar8x32_ps(inv_step, m));
      m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(draw(index), p, _CMP_LT_OQ)));
      m = _mm256_min_epi32(m, seven);
    }
    m = _mm256_blendv_epi8(m, seven, _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 28), set1(8));
    return _mm256_or_si256(m, sign);
  }

  // kE2M1Values[code]: the magnitude by one permute (it reads the low 3 bits, the magnitude's
  // code), the sign bit moved from bit 3 to bit 31.
  __m256 value_of(__m256i code) const {
    return _mm256_or_ps(
        _mm256_permutevar8x32_ps(lo_table, code),
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(code, set1(8)), 28)));
  }

  // u in [0, 1) of each lane's 32 random bits: the top 24 of counter_bits(*sr_key, index + j).
  __m256 draw(uint32_t index) const {
    __m256i h = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_add_epi32(set1(index), iota), set1(kCounterStep)), set1(*sr_key));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, set1(kFmixMul1));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
    h = _mm256_mullo_epi32(h, set1(kFmixMul2));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24f));
  }
};

}  // namespace fp8lm::isa::avx2
