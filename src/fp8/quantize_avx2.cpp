// AVX2 quantize: eight lanes of the scalar bit codec (core/fp8_dtype.h). AVX2 has no masked
// byte stores, so the last n % 8 elements go through the scalar twin.
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

// Gathers the low byte of each 32-bit lane into the low 8 bytes.
inline __m128i pack_low_bytes(__m256i v) {
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i bytes = _mm256_shuffle_epi8(v, pick);
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
}

inline int64_t sum_lanes(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int64_t sum = 0;
  for (int32_t l : lanes) sum += l;
  return sum;
}

inline float reduce_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

template <Fp8Format F>
CastStats quantize_one_format(uint8_t* codes, const float* x, int64_t n, float scale,
                              bool saturate) {
  constexpr Fp8Consts c = fp8_consts(F);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  // Signed compares are safe: |bits| <= 0x7fffffff, and codes are small non-negative ints.
  const __m256i min_normal_minus_one = _mm256_set1_epi32(static_cast<int>(c.min_normal_bits) - 1);
  const __m256 magic = _mm256_set1_ps(c.subnormal_magic);
  const __m256i magic_bits = _mm256_set1_epi32(static_cast<int>(c.magic_bits));
  // a - rebias + (half - 1) folded into one constant (mod 2^32, as the scalar codec wraps).
  const __m256i round_bias =
      _mm256_set1_epi32(static_cast<int>((1u << (c.man_shift - 1)) - 1u - c.rebias));
  // A non-zero magnitude flushes to zero exactly when it is at most half the smallest
  // subnormal (the tie goes to the even zero): 0 < a <= half_bits.
  const __m256i half_min_subnormal_plus_one =
      _mm256_set1_epi32(static_cast<int>(std::bit_cast<uint32_t>(fp8_min_subnormal(F) / 2) + 1));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i max_code = _mm256_set1_epi32(static_cast<int>(c.max_code));
  const __m256i overflow_code =
      _mm256_set1_epi32(static_cast<int>(saturate ? c.max_code : c.overflow_code));
  const __m256i nan_code = _mm256_set1_epi32(static_cast<int>(c.nan_code));
  const __m256i zero = _mm256_setzero_si256();

  __m256 amax = _mm256_setzero_ps();
  // Compare masks are -1 per set lane, so subtracting them counts in vector lanes.
  __m256i saturated = zero, flushed = zero;
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    amax = _mm256_max_ps(_mm256_and_ps(xv, _mm256_castsi256_ps(abs_mask)), amax);
    const __m256i u = _mm256_castps_si256(_mm256_mul_ps(xv, vscale));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    const __m256i a = _mm256_and_si256(u, abs_mask);
    const __m256i is_nan = _mm256_cmpgt_epi32(a, inf_bits);
    const __m256i is_sub = _mm256_cmpgt_epi32(min_normal_minus_one, a);

    const __m256i sub_code = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), magic_bits);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, c.man_shift), one);
    const __m256i norm_code =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, round_bias), odd), c.man_shift);
    __m256i code = _mm256_blendv_epi8(norm_code, sub_code, is_sub);

    const __m256i over = _mm256_andnot_si256(is_nan, _mm256_cmpgt_epi32(code, max_code));
    const __m256i flush = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, zero),
                                              _mm256_cmpgt_epi32(half_min_subnormal_plus_one, a));
    code = _mm256_blendv_epi8(code, overflow_code, over);
    code = _mm256_blendv_epi8(code, nan_code, is_nan);
    code = _mm256_or_si256(code, sign);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), pack_low_bytes(code));
    saturated = _mm256_sub_epi32(saturated, over);
    flushed = _mm256_sub_epi32(flushed, flush);
  }
  const CastStats tail = quantize_scalar(codes + body, x + body, n - body, scale, F, saturate);
  return {max_ignoring_nan(tail.amax, reduce_max(amax)), sum_lanes(saturated) + tail.saturated,
          sum_lanes(flushed) + tail.flushed};
}

}  // namespace

CastStats quantize_avx2(uint8_t* codes, const float* x, int64_t n, float scale, Fp8Format format,
                        bool saturate) {
  return format == Fp8Format::E4M3
             ? quantize_one_format<Fp8Format::E4M3>(codes, x, n, scale, saturate)
             : quantize_one_format<Fp8Format::E5M2>(codes, x, n, scale, saturate);
}

void dequantize_avx2(float* y, const uint8_t* codes, int64_t n, float scale_inv, Fp8Format format) {
  const float* table = fp8_decode_table(format).data();
  const __m256 vscale = _mm256_set1_ps(scale_inv);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256i idx =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_i32gather_ps(table, idx, 4), vscale));
  }
  dequantize_scalar(y + body, codes + body, n - body, scale_inv, format);
}

float absmax_avx2(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), amax);
  }
  return max_ignoring_nan(absmax_scalar(x + body, n - body), reduce_max(amax));
}

// The scalar E2M1 encoders' boundary counts (core/e2m1.h), eight lanes at a time; a comparison
// gives -1 in a lane, so subtracting it counts.
void e2m1_quantize_avx2(uint8_t* codes, const float* x, int64_t n, float multiplier,
                        const uint32_t* sr_key, uint32_t first_index) {
  const __m256 vm = _mm256_set1_ps(multiplier);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i seven = _mm256_set1_epi32(7);
  const __m256 lo_table = _mm256_loadu_ps(kE2M1Values.data());
  const __m256 inv_step = _mm256_loadu_ps(kE2M1InverseStep.data());
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vm);
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
      const __m256i index = _mm256_add_epi32(
          _mm256_set1_epi32(static_cast<int>(first_index + static_cast<uint32_t>(i))), iota);
      __m256i h = _mm256_add_epi32(
          _mm256_mullo_epi32(index, _mm256_set1_epi32(static_cast<int>(kCounterStep))),
          _mm256_set1_epi32(static_cast<int>(*sr_key)));
      h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
      h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(kFmixMul1)));
      h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
      h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(kFmixMul2)));
      h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
      const __m256 u =
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24f));
      m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(u, p, _CMP_LT_OQ)));
      m = _mm256_min_epi32(m, seven);
    }
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    m = _mm256_blendv_epi8(m, seven, nan);
    const __m256i sign =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 28), _mm256_set1_epi32(8));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i),
                     pack_low_bytes(_mm256_or_si256(m, sign)));
  }
  e2m1_quantize_scalar(codes + body, x + body, n - body, multiplier, sr_key,
                       first_index + static_cast<uint32_t>(body));
}

// A gather from the table and bf16_from_float's integer rounding, eight lanes at a time; the
// last n % 8 through the scalar twin.
void expand_to_bf16_avx2(bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                         CodeFormat format) {
  const float* table = decode_table(format);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i idx =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    const __m256i u = _mm256_castps_si256(
        _mm256_mul_ps(_mm256_i32gather_ps(table, idx, 4), _mm256_loadu_ps(scale + i)));
    const __m256i top = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_and_si256(top, one), half)), 16);
    // Signed compare is right here: a magnitude is at most 0x7fffffff.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf_bits);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(top, quiet), nan);
    // Pack the low halves of the eight lanes into eight 16-bit values.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  expand_to_bf16_scalar(out + i, codes + i, scale + i, n - i, format);
}

// maxps(|x|, acc) keeps acc where x is NaN: the scalar twin's max_ignoring_nan, lane by lane;
// a block's last len % 8 values go through the scalar steps.
void row_block_absmax_avx2(float* amax, const float* x, int64_t n, int64_t block) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t end = std::min(n, (b + 1) * block);
    int64_t i = b * block;
    __m256 m = _mm256_setzero_ps();
    for (; i + 8 <= end; i += 8)
      m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float r = amax[b];
    for (const float l : lanes) r = max_ignoring_nan(l, r);
    for (; i < end; ++i) r = max_ignoring_nan(std::fabs(x[i]), r);
    amax[b] = r;
  }
}

}  // namespace fp8lm::isa
