// Float8BlockScaling's row-wise (1x128) operand casts with the blocks in registers (AVX-512), as
// mx_avx512.cpp does MXFP8's: the amaxes of sixteen blocks (eight registers each) in one
// register, their scales by fp8_block_scale's arithmetic on the lanes, then each block's values
// rounded and multiplied by its scale_inv as fp8_round_blocks_to_bf16 does, from cache. Every
// step is the twin's float operation, so the bits are the same; a block's amax no longer takes
// a horizontal reduction of its own, nor its scale a scalar division.
#include <immintrin.h>

#include <cfloat>

#include "fp8/fp8_block_quantize.h"
#include "fp8/lanes_avx512.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// fp8_block_scale with power_2_scale on sixteen block amaxes (never NaN, never negative): the
// scale is the multiplier, scale_inv = 1 / scale the value b each rounded value is multiplied
// by, and its bits the code stored.
struct BlockScaleLanes {
  const __m512 max_value, epsilon;
  const __m512 one = _mm512_set1_ps(1.0f), largest = _mm512_set1_ps(FLT_MAX);
  const __m512i inf_bits = opaque_set1(0x7f800000), sign_and_exponent = opaque_set1(0xff800000);
  BlockScaleLanes(DType f, float amax_epsilon)
      : max_value(_mm512_set1_ps(fp8_max(f))), epsilon(_mm512_set1_ps(amax_epsilon)) {}

  void apply(__m512 amax, __m512i* code, __m512* b, __m512* mult) const {
    const __m512 a = _mm512_max_ps(amax, epsilon);  // below epsilon: epsilon
    const __m512i bits = _mm512_castps_si512(a);
    // Zero or Inf: a scale of 1 (the division's Inf or 0 is replaced below).
    const __mmask16 one_scale =
        _mm512_testn_epi32_mask(bits, bits) | _mm512_cmpge_epu32_mask(bits, inf_bits);
    // max / amax, an overflow to Inf made FP32's largest, then its mantissa cleared.
    const __m512 q = _mm512_min_ps(_mm512_div_ps(max_value, a), largest);
    const __m512 scale = _mm512_mask_blend_ps(
        one_scale, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(q), sign_and_exponent)),
        one);
    *mult = scale;
    *b = _mm512_div_ps(one, scale);
    *code = _mm512_castps_si512(*b);
  }
};

template <DType F>
void block_rows(float* scale_inv, bf16_t* operand, const float* x, int64_t rows, int64_t cols,
                float amax_epsilon) {
  const BlockScaleLanes rule(F, amax_epsilon);
  const Fp8RoundLanes<F> round{};
  cast_rows_of_blocks<kFp8Block / 16>(
      x, rows, cols, scale_inv, rule, [&](int64_t i, __mmask16 live, __m512 m, __m512 b) {
        // b: the block's scale_inv, in every lane
        const __m512 v = _mm512_mul_ps(load_live(live, x + i), m);
        const __m512 product = _mm512_mul_ps(round.value(_mm512_castps_si512(v)), b);
        if (_mm512_cvtss_f32(b) >= min_exact_bf16_scale<F>()) [[likely]] {
          store_exact_bf16(operand + i, product, live);
        } else {
          store_bf16(operand + i, product, live);
        }
      });
}

}  // namespace

void fp8_block_rows_avx512(float* scale_inv, bf16_t* operand, const float* x, int64_t rows,
                           int64_t cols, DType format, float amax_epsilon) {
  (format == DType::E4M3 ? block_rows<DType::E4M3> : block_rows<DType::E5M2>)(scale_inv, operand, x,
                                                                              rows, cols,
                                                                              amax_epsilon);
}

}  // namespace fp8lm::isa
