#pragma once
// Random bits addressed by position: element i of a tensor draws counter_bits(key, i), the
// same on every ISA, thread split and machine, and again on a resumed run (stochastic
// rounding, issue 14). A counter-based generator: the 64-bit seed is folded into a 32-bit key
// once, then each index goes through a multiply-xorshift finalizer (MurmurHash3's fmix32, a
// bijection with full avalanche), which vectorizes with 32-bit multiplies.
#include <cstdint>

namespace fp8lm {

// The constants the SIMD stochastic-rounding kernels use too (fp8/quantize_avx*.cpp).
inline constexpr uint32_t kFmixMul1 = 0x85ebca6bu, kFmixMul2 = 0xc2b2ae35u;
inline constexpr uint32_t kCounterStep = 0x9e3779b1u;

constexpr uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= kFmixMul1;
  h ^= h >> 13;
  h *= kFmixMul2;
  h ^= h >> 16;
  return h;
}

constexpr uint32_t counter_key(uint64_t seed) {
  return fmix32(static_cast<uint32_t>(seed)) ^
         fmix32(static_cast<uint32_t>(seed >> 32) + 0x9e3779b9u);
}

// The golden-ratio step spreads consecutive indices before the finalizer mixes them.
constexpr uint32_t counter_bits(uint32_t key, uint32_t index) {
  return fmix32(index * kCounterStep + key);
}

}  // namespace fp8lm
