#pragma once
// Whether every value is finite (no NaN, no ±Inf): what a step must be to update the weights,
// and what weights must be to be written or loaded.
#include <algorithm>
#include <cmath>
#include <span>

namespace fp8lm {

inline bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

}  // namespace fp8lm
