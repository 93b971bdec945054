// AVX-512 (F, BW, VL, DQ) quantize: sixteen lanes of the scalar bit codec (core/fp8_dtype.h),
// tails handled with masked loads and stores so every length runs the same code.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/e2m1.h"
#include "fp8/lanes_avx512.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// The BF16 of sixteen codes' values to the live lanes of out: each value (and the decoder's
// NaN) is exact in BF16, so its top half is bf16_from_float's result.
template <DType F>
void store_decoded(bf16_t* out, __m128i c8, __mmask16 live) {
  store_exact_bf16(out, decode_fp8_lanes(c8, F == DType::E4M3), live);
}

// decoded (where not null) gets each code's value as BF16.
template <DType F>
CastStats quantize_one_format(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                              float scale, bool saturate) {
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
    const __m128i c8 = _mm512_cvtepi32_epi8(encode_block(_mm512_loadu_ps(x + i), 0xffff));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), c8);
    if (decoded) store_decoded<F>(decoded + i, c8, 0xffff);
  }
  if (body < n) {
    const __mmask16 live = live_lanes(n - body);
    const __m512i code = encode_block(_mm512_maskz_loadu_ps(live, x + body), live);  // a tail
    _mm512_mask_cvtepi32_storeu_epi8(codes + body, live, code);
    if (decoded) store_decoded<F>(decoded + body, _mm512_cvtepi32_epi8(code), live);
  }
  return {_mm512_reduce_max_ps(amax), _mm512_reduce_add_epi32(saturated),
          _mm512_reduce_add_epi32(flushed)};
}

// The float bits of the largest magnitude F's saturating encoder rounds to max rather than past
// it (quantize's saturated count): max plus half its spacing, where the tie rounds to max's even
// code, one below it where max's code is odd (the tie then rounds up).
template <DType F>
constexpr uint32_t last_unsaturated_bits() {
  constexpr Fp8Consts c = fp8_consts(F);
  constexpr uint32_t max_bits = std::bit_cast<uint32_t>(fp8_max(F));
  constexpr uint32_t half_spacing = ((max_bits >> 23) - static_cast<uint32_t>(24 - c.man_shift))
                                    << 23;
  return std::bit_cast<uint32_t>(fp8_max(F) + std::bit_cast<float>(half_spacing)) -
         (c.max_code & 1u);
}
static_assert(last_unsaturated_bits<DType::E4M3>() == std::bit_cast<uint32_t>(464.0f));
static_assert(last_unsaturated_bits<DType::E5M2>() == std::bit_cast<uint32_t>(61440.0f) - 1u);

// quantize_one_format's saturating cast with decoded values, in the float domain: each scaled
// value rounded as Fp8RoundLanes does (the decoded value, exact in BF16), its code read back
// through FP16, which holds every E5M2 value (the code is its top byte) and every E4M3 value
// divided by 2^8 (the code is its exponent and mantissa bits shifted down by 7, subnormals
// too); the counts by comparing magnitudes (with the last unsaturated one, the flush bound).
// About two thirds of the operations of encoding and then decoding, the same bits.
template <DType F>
CastStats quantize_decoded_one_format(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                                      float scale) {
  constexpr bool e4m3 = F == DType::E4M3;
  const Fp8RoundLanes<F> round;
  const Fp8Lanes<F> lanes(true);  // its flush bound
  const __m512 vscale = _mm512_set1_ps(scale), e4m3_to_fp16 = _mm512_set1_ps(0x1p-8f);
  const __m512i zero = _mm512_setzero_si512(), one = opaque_set1(1),
                last_unsaturated = opaque_set1(last_unsaturated_bits<F>());
  const __m512i nan_as_fp16 = opaque_set1(std::bit_cast<uint32_t>(1.875f));
  const __m256i sign_bit = _mm256_set1_epi16(0x80);
  __m512 amax = _mm512_setzero_ps();
  __m512i saturated = zero, flushed = zero;
  // The codes (16-bit lanes) and BF16 values of sixteen values xv.
  const auto cast = [&](const __m512 xv, const __mmask16 live, __m256i* code16) {
    amax = _mm512_max_ps(_mm512_abs_ps(xv), amax);  // a NaN lane keeps amax
    const __m512i u = _mm512_castps_si512(_mm512_mul_ps(xv, vscale));
    const __m512i a = _mm512_and_si512(u, round.abs_mask);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, round.inf_bits);
    const __mmask16 over = _mm512_mask_cmpgt_epu32_mask(live & ~nan, a, last_unsaturated);
    const __mmask16 flush =
        _mm512_mask_cmplt_epu32_mask(live, _mm512_sub_epi32(a, one), lanes.half_min_subnormal);
    saturated = _mm512_mask_add_epi32(saturated, over, saturated, one);
    flushed = _mm512_mask_add_epi32(flushed, flush, flushed, one);
    const __m512 value = round.value(u, a, nan);
    // FP16 holds each E5M2 value, and each E4M3 value divided by 2^8.
    __m512i y = _mm512_castps_si512(e4m3 ? _mm512_mul_ps(value, e4m3_to_fp16) : value);
    if constexpr (e4m3) {
      // A NaN's code is 0x7f, FP16's 1.875 read this way (its NaN would read 0x7c): the sign
      // kept, the rest of 1.875's bits, in one masked ternary-logic op.
      y = _mm512_mask_ternarylogic_epi32(y, nan, nan_as_fp16, round.sign, 0xe4);
    }
    const __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(y), _MM_FROUND_TO_NEAREST_INT);
    // E4M3: (h >> 7) & 0x7f | (h >> 8) & 0x80; E5M2: h >> 8.
    *code16 = e4m3 ? _mm256_ternarylogic_epi32(_mm256_srli_epi16(h, 7), _mm256_srli_epi16(h, 8),
                                               sign_bit, 0xd8)
                   : _mm256_srli_epi16(h, 8);
    return value;
  };
  const int64_t body = n - n % 16;
  for (int64_t i = 0; i < body; i += 16) {
    __m256i code16;
    const __m512 value = cast(_mm512_loadu_ps(x + i), 0xffff, &code16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm256_cvtepi16_epi8(code16));
    store_exact_bf16(decoded + i, value, 0xffff);
  }
  if (body < n) {
    const __mmask16 live = live_lanes(n - body);
    __m256i code16;
    const __m512 value = cast(_mm512_maskz_loadu_ps(live, x + body), live, &code16);  // a tail
    _mm256_mask_cvtepi16_storeu_epi8(codes + body, live, code16);
    store_exact_bf16(decoded + body, value, live);
  }
  return {_mm512_reduce_max_ps(amax), _mm512_reduce_add_epi32(saturated),
          _mm512_reduce_add_epi32(flushed)};
}

template <DType F>
void cast_to_bf16_one_format(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                             int64_t n) {
  const Fp8Lanes<F> lanes(true);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    __mmask16 over, flush;
    const __m512i code =
        lanes.encode(_mm512_castps_si512(load_live(live, x + i)), live, &over, &flush);
    const __m128i c8 = _mm512_cvtepi32_epi8(code);
    _mm_mask_storeu_epi8(codes + i, live, c8);
    store_bf16(out + i,
               _mm512_mul_ps(decode_fp8_lanes(c8, F == DType::E4M3), load_live(live, scale + i)),
               live);
  }
}

CastStats quantize_avx512(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                          DType format, bool saturate) {
  if (decoded && saturate) {
    return format == DType::E4M3
               ? quantize_decoded_one_format<DType::E4M3>(codes, decoded, x, n, scale)
               : quantize_decoded_one_format<DType::E5M2>(codes, decoded, x, n, scale);
  }
  return format == DType::E4M3
             ? quantize_one_format<DType::E4M3>(codes, decoded, x, n, scale, saturate)
             : quantize_one_format<DType::E5M2>(codes, decoded, x, n, scale, saturate);
}

void dequantize_avx512(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
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
    amax = _mm512_max_ps(_mm512_abs_ps(load_live(live, x + i)), amax);
  }
  return _mm512_reduce_max_ps(amax);
}

// The E2M1 codes of x * multiplier, sixteen lanes at a time: emit(i, live, codes) for each.
template <class Emit>
void e2m1_lanes(const float* x, int64_t n, float multiplier, const uint32_t* sr_key,
                uint32_t first_index, Emit emit) {
  const __m512 vm = _mm512_set1_ps(multiplier);
  const E2m1Lanes e2m1(sr_key);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m512 v = _mm512_mul_ps(load_live(live, x + i), vm);
    emit(i, live, e2m1.encode(v, first_index + static_cast<uint32_t>(i)));
  }
}

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
    store_bf16(out + i,
               _mm512_mul_ps(_mm512_permutexvar_ps(code, values), load_live(live, scale + i)),
               live);
  });
}

// The decode without a gather (slow on some cores): E2M1 is one permute of its sixteen values,
// the FP8 formats widen through FP16 (decode_fp8_lanes).
void expand_to_bf16_avx512(bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                           DType format) {
  const __m512 e2m1 = _mm512_loadu_ps(kE2M1Values.data());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m128i c8 = _mm_maskz_loadu_epi8(live, codes + i);
    const __m512 decoded = format == DType::E2M1
                               ? _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c8), e2m1)
                               : decode_fp8_lanes(c8, format == DType::E4M3);
    store_bf16(out + i, _mm512_mul_ps(decoded, load_live(live, scale + i)), live);
  }
}

template <DType F>
void round_to_bf16_one_format(bf16_t* out, const float* x, const float* scale, int64_t n) {
  const Fp8RoundLanes<F> round{};
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m512 v = round.value(_mm512_castps_si512(load_live(live, x + i)));
    store_bf16(out + i, _mm512_mul_ps(v, load_live(live, scale + i)), live);
  }
}

void fp8_round_to_bf16_avx512(bf16_t* out, const float* x, const float* scale, int64_t n,
                              DType format) {
  format == DType::E4M3 ? round_to_bf16_one_format<DType::E4M3>(out, x, scale, n)
                        : round_to_bf16_one_format<DType::E5M2>(out, x, scale, n);
}

// block 1: a multiplier and a scale per value (a row of column-wise blocks), each lane's product
// stored without rounding where BF16 holds it.
template <DType F>
void round_each_one_format(bf16_t* out, const float* x, const float* mult, const float* scale,
                           int64_t n) {
  const Fp8RoundLanes<F> round{};
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = live_lanes(n - i);
    const __m512 s = load_live(live, scale + i);
    const __m512 v = _mm512_mul_ps(load_live(live, x + i), load_live(live, mult + i));
    const __m512 product = _mm512_mul_ps(round.value(_mm512_castps_si512(v)), s);
    bf16_holds_products<F>(s, live) ? store_exact_bf16(out + i, product, live)
                                    : store_bf16(out + i, product, live);
  }
}

template <DType F>
void round_blocks_one_format(bf16_t* out, const float* x, const float* mult, const float* scale,
                             int64_t n, int64_t block) {
  if (block == 1) return round_each_one_format<F>(out, x, mult, scale, n);
  const Fp8RoundLanes<F> round{};
  for (int64_t b = 0, c0 = 0; c0 < n; ++b, c0 += block) {
    const __m512 m = _mm512_set1_ps(mult[b]), s = _mm512_set1_ps(scale[b]);
    const int64_t end = std::min(n, c0 + block);
    const bool exact = scale[b] >= min_exact_bf16_scale<F>();
    for (int64_t i = c0; i < end; i += 16) {
      const __mmask16 live = live_lanes(end - i);
      const __m512 v = _mm512_mul_ps(load_live(live, x + i), m);
      const __m512 product = _mm512_mul_ps(round.value(_mm512_castps_si512(v)), s);
      exact ? store_exact_bf16(out + i, product, live) : store_bf16(out + i, product, live);
    }
  }
}

}  // namespace

void fp8_round_blocks_to_bf16_avx512(bf16_t* out, const float* x, const float* mult,
                                     const float* scale, int64_t n, int64_t block, DType format) {
  format == DType::E4M3 ? round_blocks_one_format<DType::E4M3>(out, x, mult, scale, n, block)
                        : round_blocks_one_format<DType::E5M2>(out, x, mult, scale, n, block);
}

namespace {

void fp8_cast_to_bf16_avx512(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                             int64_t n, DType format) {
  format == DType::E4M3 ? cast_to_bf16_one_format<DType::E4M3>(codes, out, x, scale, n)
                        : cast_to_bf16_one_format<DType::E5M2>(codes, out, x, scale, n);
}

// maxps(|x|, acc) keeps acc where x is NaN: the scalar twin's max_ignoring_nan, lane by lane.
void row_block_absmax_avx512(float* amax, const float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t end = std::min(n, (b + 1) * block);
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = b * block; i < end; i += 16)
      m = _mm512_max_ps(_mm512_abs_ps(load_live(live_lanes(end - i), x + i)), m);
    amax[b] = max_ignoring_nan(_mm512_reduce_max_ps(m), amax[b]);
  }
}

}  // namespace

const CastKernels kAvx512Casts{
    quantize_avx512,         dequantize_avx512,        absmax_avx512,
    e2m1_quantize_avx512,    expand_to_bf16_avx512,    row_block_absmax_avx512,
    fp8_cast_to_bf16_avx512, e2m1_cast_to_bf16_avx512, fp8_round_to_bf16_avx512};

}  // namespace fp8lm::isa
