// MXFP8's casts in one pass over registers (AVX-512), as nvfp4_avx512.cpp does NVFP4's: the
// amaxes of sixteen 1x32 blocks (two registers each) in one register, their E8M0 scales and
// multipliers by integer arithmetic on the lanes, each block scaled, rounded (or encoded) and
// written as the GEMM operand; for 32x1 blocks, each column's amax taken down a stripe of 32
// rows in a sweep along them, then the stripe cast with their scales in a second. Every step is the
// twin's float operation (mx_quantize.cpp's MxRule, core/e8m0.h, fp8_round_to_bf16), so the bits
// are the same.
#include <immintrin.h>

#include <vector>

#include "core/grown.h"
#include "fp8/lanes_avx512.h"
#include "fp8/mx_quantize.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// MxRule on sixteen block amaxes (never NaN, never negative): x = amax * (1/max) rounded up to
// a power of two as e8m0_encode_round_up does (up a code when the mantissa is non-zero; a
// subnormal x only from above 2^-127; +Inf and the top binade to 0xFE), each scale's decoded
// value b (e8m0_decode: code 0 is the subnormal 2^-127) and multiplier (e8m0_reciprocal:
// 2^(127 - code), 1 for code 0, the subnormal 2^-127 for code 254).
struct MxScaleLanes {
  const __m512 max_rcp;
  const __m512i one = opaque_set1(1), mantissa = opaque_set1(0x7fffff),
                half = opaque_set1(0x400000), top = opaque_set1(0xfe),
                exponent_sum = opaque_set1(254), one_float = opaque_set1(0x3f800000);
  explicit MxScaleLanes(DType f)
      : max_rcp(_mm512_set1_ps(static_cast<float>(1.0 / static_cast<double>(fp8_max(f))))) {}

  void apply(__m512 amax, __m512i* code, __m512* b, __m512* mult) const {
    const __m512i u = _mm512_castps_si512(_mm512_mul_ps(amax, max_rcp));
    const __m512i e = _mm512_srli_epi32(u, 23), m = _mm512_and_si512(u, mantissa);
    const __mmask16 normal = _mm512_test_epi32_mask(e, e);
    const __mmask16 up = _mm512_mask_test_epi32_mask(normal, m, m) |
                         _mm512_mask_cmpgt_epu32_mask(static_cast<__mmask16>(~normal), m, half);
    const __m512i s = _mm512_min_epu32(_mm512_mask_add_epi32(e, up, e, one), top);
    *code = s;
    const __mmask16 zero = _mm512_testn_epi32_mask(s, s);
    *b = _mm512_castsi512_ps(_mm512_mask_blend_epi32(zero, _mm512_slli_epi32(s, 23), half));
    const __m512i rcp =
        _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(s, exponent_sum),
                                _mm512_slli_epi32(_mm512_sub_epi32(exponent_sum, s), 23), half);
    *mult = _mm512_castsi512_ps(_mm512_mask_blend_epi32(zero, rcp, one_float));
  }
};

// Sixteen scaled values' BF16 operand values (the rounded value times the block's b), and
// their codes where kept (KeepCodes: known to the compiler, so the loops carry no test of it).
// b is a power of two, so where the blocks' b is at least min_exact_bf16_scale (exact, the
// caller's test) each product is a BF16 value and is stored without rounding.
template <DType F, bool KeepCodes>
struct MxStore {
  const Fp8Lanes<F> encoder{true};
  const Fp8RoundLanes<F> round{};

  void operator()(uint8_t* codes, bf16_t* out, __m512 v, __m512 b, __mmask16 live,
                  bool exact) const {
    const __m512i u = _mm512_castps_si512(v);
    __m512 value;
    if constexpr (KeepCodes) {
      __mmask16 over, flush;
      const __m128i c8 = _mm512_cvtepi32_epi8(encoder.encode(u, live, &over, &flush));
      _mm_mask_storeu_epi8(codes, live, c8);
      value = decode_fp8_lanes(c8, F == DType::E4M3);
    } else {
      value = round.value(u);
    }
    const __m512 product = _mm512_mul_ps(value, b);
    if (exact) [[likely]] {
      store_exact_bf16(out, product, live);
    } else {
      store_bf16(out, product, live);
    }
  }
};

template <DType F, bool KeepCodes>
void mx_rows(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x, int64_t rows,
             int64_t cols) {
  const MxScaleLanes rule(F);
  const MxStore<F, KeepCodes> store;
  cast_rows_of_blocks<kMxBlock / 16>(x, rows, cols, scales, rule,
                                     [&](int64_t i, __mmask16 live, __m512 m, __m512 b) {
                                       // b: the block's, in every lane
                                       store(KeepCodes ? codes + i : nullptr, operand + i,
                                             _mm512_mul_ps(load_live(live, x + i), m), b, live,
                                             _mm512_cvtss_f32(b) >= min_exact_bf16_scale<F>());
                                     });
}

// A stripe of at most 32 rows in 32x1 blocks, in two sweeps along its rows (contiguous loads,
// not a column of sixteen lanes at a time down the rows): each column's amax, then the rows
// cast with their columns' multipliers and b from the rule's registers kept in memory.
template <DType F, bool KeepCodes>
void mx_columns(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x, int64_t rows,
                int64_t cols) {
  const MxScaleLanes rule(F);
  const MxStore<F, KeepCodes> store;
  thread_local std::vector<float> storage;
  const auto padded = static_cast<size_t>((cols + 15) / 16 * 16);
  float* const amax = grown(storage, 3 * padded);
  float* const mult = amax + padded;
  float* const b = mult + padded;
  for (int64_t c0 = 0; c0 < cols; c0 += 16) _mm512_storeu_ps(amax + c0, _mm512_setzero_ps());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const __m512 v = load_live(live_lanes(cols - c0), x + r * cols + c0);
      _mm512_storeu_ps(amax + c0, _mm512_max_ps(_mm512_abs_ps(v), _mm512_loadu_ps(amax + c0)));
    }
  bool exact = true;  // every column's b: then no chunk needs its own test
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const __mmask16 live = live_lanes(cols - c0);
    __m512i code;
    __m512 bv, mv;
    rule.apply(_mm512_loadu_ps(amax + c0), &code, &bv, &mv);
    _mm512_mask_cvtepi32_storeu_epi8(scales + c0, live, code);
    _mm512_storeu_ps(b + c0, bv);
    _mm512_storeu_ps(mult + c0, mv);
    exact = exact && bf16_holds_products<F>(bv, live);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const __mmask16 live = live_lanes(cols - c0);
      const int64_t i = r * cols + c0;
      const __m512 bv = _mm512_loadu_ps(b + c0);
      store(KeepCodes ? codes + i : nullptr, operand + i,
            _mm512_mul_ps(load_live(live, x + i), _mm512_loadu_ps(mult + c0)), bv, live,
            exact || bf16_holds_products<F>(bv, live));
    }
}

}  // namespace

void mxfp8_rows_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                       int64_t rows, int64_t cols, DType format) {
  using Cast = void (*)(uint8_t*, uint8_t*, bf16_t*, const float*, int64_t, int64_t);
  const Cast cast = format == DType::E4M3
                        ? (codes ? mx_rows<DType::E4M3, true> : mx_rows<DType::E4M3, false>)
                        : (codes ? mx_rows<DType::E5M2, true> : mx_rows<DType::E5M2, false>);
  cast(codes, scales, operand, x, rows, cols);
}

void mxfp8_columns_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                          int64_t rows, int64_t cols, DType format) {
  using Cast = void (*)(uint8_t*, uint8_t*, bf16_t*, const float*, int64_t, int64_t);
  const Cast cast = format == DType::E4M3
                        ? (codes ? mx_columns<DType::E4M3, true> : mx_columns<DType::E4M3, false>)
                        : (codes ? mx_columns<DType::E5M2, true> : mx_columns<DType::E5M2, false>);
  cast(codes, scales, operand, x, rows, cols);
}

}  // namespace fp8lm::isa
