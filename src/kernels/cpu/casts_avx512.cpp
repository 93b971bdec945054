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
    isa::store_exact_bf16(y + i, isa::decode_fp8_lanes(_mm_maskz_loadu_epi8(live, codes + i), e4m3),
                          live);
  }
}

// bf16_from_float's integer rounding, sixteen lanes at a time (isa::rounded_bf16).
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = isa::live_lanes(n - i);
    isa::store_bf16(y + i, isa::load_live(live, x + i), live);
  }
}

}  // namespace fp8lm::cpu::avx512
