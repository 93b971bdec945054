// Built with AVX-512 flags (src/CMakeLists.txt); reached only through casts.cpp's dispatch.
#include <immintrin.h>

#include "fp8/lanes_avx512.h"
#include "kernels/cpu/casts.h"

namespace fp8lm::cpu::avx512 {

void bf16_to_f32(float* y, const bf16_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

// Both FP8 formats widen through FP16, exactly (fp8/lanes_avx512.h, decode_fp8_lanes); NaN
// codes become the table's NaN with the code's sign.
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f) {
  const bool e4m3 = f == DType::E4M3;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = isa::live_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, live,
                          isa::decode_fp8_lanes(_mm_maskz_loadu_epi8(live, codes + i), e4m3));
  }
}

// An FP8 value (at most 4 significant bits) is exact in BF16: its BF16 is the top half of its
// FP32, and a NaN's top half is the quiet NaN bf16_from_float makes of it.
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f) {
  const bool e4m3 = f == DType::E4M3;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = isa::live_lanes(n - i);
    const __m512 v = isa::decode_fp8_lanes(_mm_maskz_loadu_epi8(live, codes + i), e4m3);
    const __m256i top = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
    if (live == 0xffff) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), top);
    } else {
      _mm256_mask_storeu_epi16(y + i, live, top);
    }
  }
}

// fp32_to_bf16: vcvtneps2bf16 would be one instruction, but it flushes subnormal inputs to zero
// and needs AVX512-BF16; this is bf16_from_float's integer rounding, sixteen lanes at a time.
namespace {

// The same steps as bf16_from_float, with the NaN case as a lane select instead of a branch.
// NaN lanes may wrap around in the rounding add; they are replaced anyway.
__m256i round_to_bf16(__m512i u) {
  const __m512i top = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet = _mm512_or_si512(top, _mm512_set1_epi32(0x40));
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

}  // namespace

void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), round_to_bf16(u));
  }
  if (i == n) return;
  const auto m = static_cast<__mmask16>((1u << (n - i)) - 1u);
  const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
  _mm256_mask_storeu_epi16(y + i, m, round_to_bf16(u));
}

}  // namespace fp8lm::cpu::avx512
