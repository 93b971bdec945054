#pragma once
// Pieces the row-wise CPU kernels share.
#include <cstdint>

namespace fp8lm::cpu {

// Below this many elements an OpenMP parallel region costs more than it saves.
inline constexpr int64_t kParallelMin = int64_t{1} << 15;

// A row sum in float with 16 independent partials: a fixed order (so the same bits every
// run) that the compiler can vectorize, which it may not do with one serial accumulator.
inline constexpr int64_t kLanes = 16;

template <typename Term>
inline float lane_sum(int64_t n, Term term) {
  float part[kLanes] = {};
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) part[j] += term(i + j);
  for (int64_t i = body; i < n; ++i) part[i - body] += term(i);
  float sum = 0.0f;
  for (float p : part) sum += p;
  return sum;
}

}  // namespace fp8lm::cpu
