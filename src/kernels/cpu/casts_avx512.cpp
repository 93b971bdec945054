// Built with AVX-512 flags (src/CMakeLists.txt); reached only through casts.cpp's dispatch.
#include <immintrin.h>

#include <cmath>

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

// Both FP8 formats widen through FP16, which holds each of their values exactly: an E5M2 code
// is the top byte of the FP16 with the same value; an E4M3 code's exponent and mantissa, moved
// to FP16's positions, read 2^8 too small (bias 15 instead of 7) for normals and subnormals
// alike, so one exact multiply by 256 finishes it. E4M3's NaN codes (S.1111.111) would read as
// 480 that way and are patched.
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::E4M3;
  const __m512 two8 = _mm512_set1_ps(256.0f);
  const __m512 nan = _mm512_set1_ps(std::nanf(""));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i c8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    const __m256i c16 = _mm256_cvtepu8_epi16(c8);
    __m512 v;
    if (e4m3) {
      const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(c16, _mm256_set1_epi16(0x80)), 8);
      const __m256i mag = _mm256_and_si256(c16, _mm256_set1_epi16(0x7f));
      const __m256i h = _mm256_or_si256(sign, _mm256_slli_epi16(mag, 7));
      v = _mm512_mul_ps(_mm512_cvtph_ps(h), two8);
      const __mmask16 is_nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
      v = _mm512_mask_mov_ps(v, is_nan, nan);
    } else {
      v = _mm512_cvtph_ps(_mm256_slli_epi16(c16, 8));
    }
    _mm512_storeu_ps(y + i, v);
  }
  for (; i < n; ++i) y[i] = fp8_decode(codes[i], f);
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
