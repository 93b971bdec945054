// Built with AVX-512 flags (src/CMakeLists.txt); reached only through upcast.cpp's dispatch.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/upcast.h"

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

}  // namespace fp8lm::cpu::avx512
