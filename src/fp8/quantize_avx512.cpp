// AVX-512 (F, BW, VL, DQ) quantize: sixteen lanes of the scalar bit codec (core/fp8_dtype.h),
// tails handled with masked loads and stores so every length runs the same code.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// Lanes holding data when `left` elements remain: all sixteen, or the tail.
inline __mmask16 live_lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// The scalar codec's steps on sixteen lanes of scaled values' bits u: the code (sign
// included), the lanes that rounded past max (over) and the non-zero ones that flushed to zero
// (flush), live lanes only.
template <Fp8Format F>
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

template <Fp8Format F>
CastStats quantize_one_format(uint8_t* codes, const float* x, int64_t n, float scale,
                              bool saturate) {
  const Fp8Lanes<F> lanes(saturate);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
  // Counts stay in vector lanes (one add per block, no mask-to-GPR moves); a lane counts at
  // most n/16 events, far below int32's limit for any tensor that fits in memory.
  __m512 amax = _mm512_setzero_ps();
  __m512i saturated = zero, flushed = zero;
  const auto encode_block = [&](const __m512 xv, const __mmask16 live) {
    amax = _mm512_max_ps(_mm512_abs_ps(xv), amax);  // a NaN lane keeps amax
    __mmask16 over, flush;
    const __m512i code =
        lanes.encode(_mm512_castps_si512(_mm512_mul_ps(xv, vscale)), live, &over, &flush);
    saturated = _mm512_mask_add_epi32(saturated, over, saturated, one);
    flushed = _mm512_mask_add_epi32(flushed, flush, flushed, one);
    return code;
  };
  const int64_t body = n - n % 16;
  for (int64_t i = 0; i < body; i += 16) {
    const __m512i code = encode_block(_mm512_loadu_ps(x + i), __mmask16(0xffff));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(code));
  }
  if (body < n) {
    const __mmask16 live = live_lanes(n - body);
    const __m512i code = encode_block(_mm512_maskz_loadu_ps(live, x + body), live);
    _mm512_mask_cvtepi32_storeu_epi8(codes + body, live, code);
  }
  return {_mm512_reduce_max_ps(amax), _mm512_reduce_add_epi32(saturated),
          _mm512_reduce_add_epi32(flushed)};
}

// The decoded values of sixteen FP8 codes, exactly: both formats widen through FP16, which
// holds each of their values: an E5M2 code is the top byte of the FP16 with its value; an
// E4M3 code's exponent and mantissa, moved to FP16's positions, read 2^8 too small (bias 15
// instead of 7), for normals and subnormals alike, and its NaN codes (S.1111.111) read as
// ±480. NaN codes of both become the table's NaN (the default NaN with the code's sign; FP16
// would keep E5M2's payload).
__m512 decode_fp8_lanes(__m128i c8, bool e4m3) {
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

// bf16_from_float's integer rounding on sixteen lanes (vcvtneps2bf16 would need AVX512-BF16
// and flushes subnormals), stored to the live lanes of out.
void store_bf16(bf16_t* out, __m512 v, __mmask16 live) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i top = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(top, _mm512_set1_epi32(1)),
                                           _mm512_set1_epi32(0x7fff))),
      16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
  _mm256_mask_storeu_epi16(out + 0, live, _mm512_cvtepi32_epi16(r));
}

template <Fp8Format F>
void cast_to_bf16_one_format(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                             int64_t n) {
  const Fp8Lanes<F> lanes(true);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    __mmask16 over, flush;
    const __m512i code =
        lanes.encode(_mm512_castps_si512(_mm512_maskz_loadu_ps(live, x + i)), live, &over, &flush);
    const __m128i c8 = _mm512_cvtepi32_epi8(code);
    _mm_mask_storeu_epi8(codes + i, live, c8);
    store_bf16(out + i,
               _mm512_mul_ps(decode_fp8_lanes(c8, F == Fp8Format::E4M3),
                             _mm512_maskz_loadu_ps(live, scale + i)),
               live);
  }
}

}  // namespace

CastStats quantize_avx512(uint8_t* codes, const float* x, int64_t n, float scale, Fp8Format format,
                          bool saturate) {
  return format == Fp8Format::E4M3
             ? quantize_one_format<Fp8Format::E4M3>(codes, x, n, scale, saturate)
             : quantize_one_format<Fp8Format::E5M2>(codes, x, n, scale, saturate);
}

void dequantize_avx512(float* y, const uint8_t* codes, int64_t n, float scale_inv,
                       Fp8Format format) {
  const float* table = fp8_decode_table(format).data();
  const __m512 vscale = _mm512_set1_ps(scale_inv);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(live, codes + i));
    const __m512 v = _mm512_i32gather_ps(idx, table, 4);
    _mm512_mask_storeu_ps(y + i, live, _mm512_mul_ps(v, vscale));
  }
}

float absmax_avx512(const float* x, int64_t n) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    amax = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(live, x + i)), amax);
  }
  return _mm512_reduce_max_ps(amax);
}

// The scalar E2M1 encoders' boundary counts (core/e2m1.h), sixteen lanes at a time.
namespace {

// The E2M1 codes of x * multiplier, sixteen lanes at a time: emit(i, live, codes) for each.
template <class Emit>
void e2m1_lanes(const float* x, int64_t n, float multiplier, const uint32_t* sr_key,
                uint32_t first_index, Emit emit) {
  const __m512 vm = _mm512_set1_ps(multiplier);
  const __m512i one = _mm512_set1_epi32(1), seven = _mm512_set1_epi32(7);
  const __m512 lo_table = _mm512_loadu_ps(kE2M1Values.data());  // codes 0-7 are the magnitudes
  const __m512 inv_step = _mm512_castps256_ps512(_mm256_loadu_ps(kE2M1InverseStep.data()));
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const auto encode = [&](const __m512 xv, int64_t i) {
    const __m512 v = _mm512_mul_ps(xv, vm);
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
      const __m512i index = _mm512_add_epi32(
          _mm512_set1_epi32(static_cast<int>(first_index + static_cast<uint32_t>(i))), iota);
      __m512i h = _mm512_add_epi32(
          _mm512_mullo_epi32(index, _mm512_set1_epi32(static_cast<int>(kCounterStep))),
          _mm512_set1_epi32(static_cast<int>(*sr_key)));
      h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
      h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(kFmixMul1)));
      h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
      h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(kFmixMul2)));
      h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
      const __m512 u =
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(0x1p-24f));
      m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(u, p, _CMP_LT_OQ), m, one);
      m = _mm512_min_epi32(m, seven);
    }
    m = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), m, seven);
    const __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 28), _mm512_set1_epi32(8));
    return _mm512_or_si512(m, sign);
  };
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    emit(i, live, encode(_mm512_maskz_loadu_ps(live, x + i), i));
  }
}

}  // namespace

void e2m1_quantize_avx512(uint8_t* codes, const float* x, int64_t n, float multiplier,
                          const uint32_t* sr_key, uint32_t first_index) {
  e2m1_lanes(x, n, multiplier, sr_key, first_index, [&](int64_t i, __mmask16 live, __m512i code) {
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, live, code);
  });
}

// The codes and, from them still in registers, the operand: one permute of E2M1's values.
void e2m1_cast_to_bf16_avx512(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                              int64_t n, const uint32_t* sr_key, uint32_t first_index) {
  const __m512 values = _mm512_loadu_ps(kE2M1Values.data());
  e2m1_lanes(x, n, 1.0f, sr_key, first_index, [&](int64_t i, __mmask16 live, __m512i code) {
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, live, code);
    store_bf16(
        out + i,
        _mm512_mul_ps(_mm512_permutexvar_ps(code, values), _mm512_maskz_loadu_ps(live, scale + i)),
        live);
  });
}

// The decode without a gather (slow on some cores): E2M1 is one permute of its sixteen values,
// the FP8 formats widen through FP16 (decode_fp8_lanes).
void expand_to_bf16_avx512(bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                           CodeFormat format) {
  const __m512 e2m1 = _mm512_loadu_ps(kE2M1Values.data());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m128i c8 = _mm_maskz_loadu_epi8(live, codes + i);
    const __m512 decoded = format == CodeFormat::E2M1
                               ? _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c8), e2m1)
                               : decode_fp8_lanes(c8, format == CodeFormat::E4M3);
    store_bf16(out + i, _mm512_mul_ps(decoded, _mm512_maskz_loadu_ps(live, scale + i)), live);
  }
}

// The encoder's rounding kept in the float domain: a normal magnitude's dropped mantissa bits
// rounded to nearest even and cleared (the code's value, as rebias is a multiple of the kept
// step), past the largest value clamped to it (saturation, Inf included); a subnormal one
// rounded to the subnormal spacing by adding and removing the magic number; NaN the table's
// NaN; the sign put back.
template <Fp8Format F>
void round_to_bf16_one_format(bf16_t* out, const float* x, const float* scale, int64_t n) {
  constexpr Fp8Consts c = fp8_consts(F);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf_bits = _mm512_set1_epi32(0x7f800000);
  const __m512i min_normal = _mm512_set1_epi32(static_cast<int>(c.min_normal_bits));
  const __m512i half_minus_one = _mm512_set1_epi32(static_cast<int>((1u << (c.man_shift - 1)) - 1));
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(~((1u << c.man_shift) - 1)));
  const __m512i max_bits = _mm512_set1_epi32(static_cast<int>(std::bit_cast<uint32_t>(fp8_max(F))));
  const __m512i one = _mm512_set1_epi32(1), quiet_nan = _mm512_set1_epi32(0x7fc00000);
  const __m512 magic = _mm512_set1_ps(c.subnormal_magic);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(live, x + i));
    const __m512i a = _mm512_and_si512(u, abs_mask);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, c.man_shift), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(a, half_minus_one), odd), keep);
    r = _mm512_min_epu32(r, max_bits);
    const __m512 sub = _mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), magic), magic);
    r = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, min_normal), r,
                                _mm512_castps_si512(sub));
    r = _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(a, inf_bits), r, quiet_nan);
    // r | (u & sign): one ternary-logic op.
    r = _mm512_ternarylogic_epi32(r, u, _mm512_set1_epi32(static_cast<int>(0x80000000u)), 0xf8);
    store_bf16(out + i,
               _mm512_mul_ps(_mm512_castsi512_ps(r), _mm512_maskz_loadu_ps(live, scale + i)), live);
  }
}

void fp8_round_to_bf16_avx512(bf16_t* out, const float* x, const float* scale, int64_t n,
                              Fp8Format format) {
  format == Fp8Format::E4M3 ? round_to_bf16_one_format<Fp8Format::E4M3>(out, x, scale, n)
                            : round_to_bf16_one_format<Fp8Format::E5M2>(out, x, scale, n);
}

void fp8_cast_to_bf16_avx512(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                             int64_t n, Fp8Format format) {
  format == Fp8Format::E4M3 ? cast_to_bf16_one_format<Fp8Format::E4M3>(codes, out, x, scale, n)
                            : cast_to_bf16_one_format<Fp8Format::E5M2>(codes, out, x, scale, n);
}

// maxps(|x|, acc) keeps acc where x is NaN: the scalar twin's max_ignoring_nan, lane by lane.
void row_block_absmax_avx512(float* amax, const float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t end = std::min(n, (b + 1) * block);
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = b * block; i < end; i += 16)
      m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(live_lanes(end - i), x + i)), m);
    amax[b] = max_ignoring_nan(_mm512_reduce_max_ps(m), amax[b]);
  }
}

}  // namespace fp8lm::isa
