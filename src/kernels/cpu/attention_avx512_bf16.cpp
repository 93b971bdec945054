// Built with AVX-512 and AVX512-BF16 flags (src/CMakeLists.txt); reached only through
// attention.cpp's dispatch on a CPU that has them and runs VDPBF16PS faster than FP32 FMAs.
// The BF16 kernel set (attention_avx512_bf16.h) on VDPBF16PS: each instruction multiplies 16
// pairs and adds both products to 16 FP32 accumulators, twice an FMA's work, in the order and
// with the rounding and flushing that attention_tiles::dot2 spells out.
#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "kernels/cpu/attention_avx512_bf16.h"

namespace fp8lm::cpu::avx512 {
namespace {

struct NativeDot {
  using Wide = __m512i;
  using Vec = __m512i;
  static Wide broadcast(uint32_t pair) { return _mm512_set1_epi32(static_cast<int>(pair)); }
  static Vec load(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static Vec load(const uint32_t* p, __mmask16 tail) { return _mm512_maskz_loadu_epi32(tail, p); }
  static __m512 dot(__m512 acc, Wide a, Vec b) {
    return _mm512_dpbf16_ps(acc, std::bit_cast<__m512bh>(a), std::bit_cast<__m512bh>(b));
  }
};

}  // namespace

const attention_tiles::Bf16Kernels& attention_bf16_kernels() {
  static const attention_tiles::Bf16Kernels k = bf16_tiles::kernels_with<NativeDot>();
  return k;
}

}  // namespace fp8lm::cpu::avx512
