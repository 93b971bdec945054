// AVX2 quantize: eight lanes of the scalar bit codec (core/fp8_dtype.h, fp8/lanes_avx2.h).
// AVX2 has no masked byte stores, so the last n % 8 elements go through the scalar twin.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "fp8/lanes_avx2.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

using namespace avx2;

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

// decoded (where not null) gets each code's value as BF16 (exact, so the top halves).
template <DType F>
CastStats quantize_one_format(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                              float scale, bool saturate) {
  const Fp8Lanes<F> lanes(saturate);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 abs_mask = _mm256_castsi256_ps(lanes.abs_mask);
  __m256 amax = _mm256_setzero_ps();
  // Compare masks are -1 per set lane, so subtracting them counts in vector lanes.
  __m256i saturated = _mm256_setzero_si256(), flushed = _mm256_setzero_si256();
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    amax = _mm256_max_ps(_mm256_and_ps(xv, abs_mask), amax);
    __m256i over, flush;
    const __m256i code =
        lanes.encode(_mm256_castps_si256(_mm256_mul_ps(xv, vscale)), &over, &flush);
    const __m128i c8 = pack_low_bytes(code);
    store8_bytes(codes + i, c8);
    if (decoded) store8_bf16(decoded + i, exact_bf16(decode_fp8(c8, F == DType::E4M3)));
    saturated = _mm256_sub_epi32(saturated, over);
    flushed = _mm256_sub_epi32(flushed, flush);
  }
  const CastStats tail = kScalarCasts.quantize(codes + body, decoded ? decoded + body : nullptr,
                                               x + body, n - body, scale, F, saturate);
  return {max_ignoring_nan(tail.amax, reduce_max(amax)), sum_lanes(saturated) + tail.saturated,
          sum_lanes(flushed) + tail.flushed};
}

// The codes and, from them still in registers, the operand: the decoded code times the scale.
template <DType F>
void cast_to_bf16_one_format(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                             int64_t n) {
  const Fp8Lanes<F> lanes(true);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    __m256i over, flush;
    const __m128i c8 =
        pack_low_bytes(lanes.encode(_mm256_castps_si256(_mm256_loadu_ps(x + i)), &over, &flush));
    store8_bytes(codes + i, c8);
    store8_bf16(out + i, round_to_bf16(_mm256_mul_ps(decode_fp8(c8, F == DType::E4M3),
                                                     _mm256_loadu_ps(scale + i))));
  }
  kScalarCasts.fp8_cast_to_bf16(codes + body, out + body, x + body, scale + body, n - body, F);
}

template <DType F>
void round_to_bf16_one_format(bf16_t* out, const float* x, const float* scale, int64_t n) {
  const Fp8RoundLanes<F> round{};
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 v = round.value(_mm256_castps_si256(_mm256_loadu_ps(x + i)));
    store8_bf16(out + i, round_to_bf16(_mm256_mul_ps(v, _mm256_loadu_ps(scale + i))));
  }
  kScalarCasts.fp8_round_to_bf16(out + body, x + body, scale + body, n - body, F);
}

CastStats quantize_avx2(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                        DType format, bool saturate) {
  return format == DType::E4M3
             ? quantize_one_format<DType::E4M3>(codes, decoded, x, n, scale, saturate)
             : quantize_one_format<DType::E5M2>(codes, decoded, x, n, scale, saturate);
}

void dequantize_avx2(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
  const __m256 vscale = _mm256_set1_ps(scale_inv);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 v = decode_fp8(load8_bytes(codes + i), format == DType::E4M3);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, vscale));
  }
  kScalarCasts.dequantize(y + body, codes + body, n - body, scale_inv, format);
}

float absmax_avx2(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), amax);
  }
  return max_ignoring_nan(kScalarCasts.absmax(x + body, n - body), reduce_max(amax));
}

void e2m1_quantize_avx2(uint8_t* codes, const float* x, int64_t n, float multiplier,
                        const uint32_t* sr_key, uint32_t first_index) {
  const E2m1Lanes e2m1(sr_key);
  const __m256 vm = _mm256_set1_ps(multiplier);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vm);
    store8_bytes(codes + i, pack_low_bytes(e2m1.encode(v, first_index + static_cast<uint32_t>(i))));
  }
  kScalarCasts.e2m1_quantize(codes + body, x + body, n - body, multiplier, sr_key,
                             first_index + static_cast<uint32_t>(body));
}

// The codes and, from them still in registers, the operand: one permute of E2M1's values.
void e2m1_cast_to_bf16_avx2(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                            int64_t n, const uint32_t* sr_key, uint32_t first_index) {
  const E2m1Lanes e2m1(sr_key);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m256i code =
        e2m1.encode(_mm256_loadu_ps(x + i), first_index + static_cast<uint32_t>(i));
    store8_bytes(codes + i, pack_low_bytes(code));
    store8_bf16(out + i,
                round_to_bf16(_mm256_mul_ps(e2m1.value_of(code), _mm256_loadu_ps(scale + i))));
  }
  kScalarCasts.e2m1_cast_to_bf16(codes + body, out + body, x + body, scale + body, n - body, sr_key,
                                 first_index + static_cast<uint32_t>(body));
}

void fp8_round_to_bf16_avx2(bf16_t* out, const float* x, const float* scale, int64_t n,
                            DType format) {
  format == DType::E4M3 ? round_to_bf16_one_format<DType::E4M3>(out, x, scale, n)
                        : round_to_bf16_one_format<DType::E5M2>(out, x, scale, n);
}

void fp8_cast_to_bf16_avx2(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                           int64_t n, DType format) {
  format == DType::E4M3 ? cast_to_bf16_one_format<DType::E4M3>(codes, out, x, scale, n)
                        : cast_to_bf16_one_format<DType::E5M2>(codes, out, x, scale, n);
}

// The decode without a gather (slow on many cores): FP8 widens through FP16 (decode_fp8),
// E2M1 is one permute of its values; then bf16_from_float's rounding. The last n % 8 through
// the scalar twin.
void expand_to_bf16_avx2(bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                         DType format) {
  const E2m1Lanes e2m1(nullptr);
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) {
    const __m128i c8 = load8_bytes(codes + i);
    const __m256 decoded = format == DType::E2M1 ? e2m1.value_of(_mm256_cvtepu8_epi32(c8))
                                                 : decode_fp8(c8, format == DType::E4M3);
    store8_bf16(out + i, round_to_bf16(_mm256_mul_ps(decoded, _mm256_loadu_ps(scale + i))));
  }
  kScalarCasts.expand_to_bf16(out + body, codes + body, scale + body, n - body, format);
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

}  // namespace

const CastKernels kAvx2Casts{quantize_avx2,         dequantize_avx2,        absmax_avx2,
                             e2m1_quantize_avx2,    expand_to_bf16_avx2,    row_block_absmax_avx2,
                             fp8_cast_to_bf16_avx2, e2m1_cast_to_bf16_avx2, fp8_round_to_bf16_avx2};

}  // namespace fp8lm::isa
