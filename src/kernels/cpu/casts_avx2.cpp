// Built with AVX2, FMA and F16C flags (src/CMakeLists.txt); reached only through casts.cpp's
// dispatch. Eight lanes at a time, the last n % 8 elements one by one as the twins do them.
#include <immintrin.h>

#include "fp8/lanes_avx2.h"
#include "kernels/cpu/casts.h"

namespace fp8lm::cpu::avx2 {

using namespace isa::avx2;

void bf16_to_f32(float* y, const bf16_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

// Both FP8 formats widen through FP16, exactly (fp8/lanes_avx2.h, decode_fp8).
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f) {
  const bool e4m3 = f == DType::E4M3;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, decode_fp8(load8_bytes(codes + i), e4m3));
  for (; i < n; ++i) y[i] = fp8_decode(codes[i], f);
}

// An FP8 value is exact in BF16: its BF16 is the top half of its FP32 (a NaN's, the quiet NaN
// bf16_from_float makes of it).
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f) {
  const bool e4m3 = f == DType::E4M3;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    store8_bf16(y + i, exact_bf16(decode_fp8(load8_bytes(codes + i), e4m3)));
  for (; i < n; ++i) y[i] = bf16_from_float(fp8_decode(codes[i], f));
}

void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8_bf16(y + i, round_to_bf16(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = bf16_from_float(x[i]);
}

}  // namespace fp8lm::cpu::avx2
