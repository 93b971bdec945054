#pragma once
// Shared test inputs: random tensors salted with the values casts get wrong.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/quantize.h"

namespace fp8lm::test {

// Normal values at a random spread of magnitudes (so some underflow and some overflow a
// cast), about one in eight replaced by a special: ±0, ±Inf, NaN, float subnormals,
// FP8 boundaries and midpoints.
inline std::vector<float> random_with_specials(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-24, 20);
  std::uniform_int_distribution<int> pick(0, 7 + 13);
  const float specials[] = {0.0f,   -0.0f,  INFINITY,  -INFINITY, NAN,      FLT_TRUE_MIN, -1e-40f,
                            448.0f, 464.0f, -57344.0f, 61440.0f,  0x1p-10f, 0x1p-17f};
  std::vector<float> x(n);
  for (auto& v : x) {
    const int k = pick(rng);
    v = k < 8 ? std::ldexp(normal(rng), exponent(rng)) : specials[k - 8];
  }
  return x;
}

using Vec = std::vector<float>;

inline Vec random_normal(int64_t n, uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, stddev);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// |got - want| <= atol + rtol * |want| everywhere; reports the first failure only.
inline void expect_close(const Vec& got, const Vec& want, float rtol, float atol,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " at " << i;
  }
}

inline bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n values from N(0, stddev), reproducible by seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  return random_normal(static_cast<int64_t>(n), seed, 0.0f, stddev);
}

// A fused FP8 producer's statistics against quantize's on the unfused output: all equal.
inline void expect_same_stats(const CastStats& got, const CastStats& want) {
  EXPECT_EQ(got.amax, want.amax);
  EXPECT_EQ(got.saturated, want.saturated);
  EXPECT_EQ(got.flushed, want.flushed);
}

}  // namespace fp8lm::test
