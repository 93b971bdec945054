#pragma once
// Whether every value is finite (no NaN, no ±Inf): what a step must be to update the weights,
// and what weights must be to be written or loaded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

namespace fp8lm {

inline bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// The same over FP32 values held as bytes at any alignment (a mapped file's, a staging
// buffer's): a float is finite unless its 8 exponent bits are all ones.
inline bool all_finite_f32_bytes(std::span<const uint8_t> bytes) {
  bool finite = true;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    uint32_t bits;
    std::memcpy(&bits, bytes.data() + i, 4);
    finite &= (bits & 0x7f800000u) != 0x7f800000u;
  }
  return finite;
}

}  // namespace fp8lm
