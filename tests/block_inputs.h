#pragma once
// Inputs for the block quantizers' tests (issue 14): values over many binades, and the special
// inputs every recipe is checked on: zeros, a block of all-equal values, one huge outlier, NaN,
// ±Inf and subnormals.
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace fp8lm {

inline std::vector<float> random_tensor(int64_t n, uint64_t seed, float sigma = 3.0f) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<float> magnitude(0.0f, sigma);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = negative(rng) ? -magnitude(rng) : magnitude(rng);
  return x;
}

// A random [rows, cols] tensor with the specials sprinkled every 29 values, and its first
// `equal_run` values all equal (a whole block of them for blocks up to that long).
inline std::vector<float> tensor_with_specials(int64_t rows, int64_t cols, uint64_t seed,
                                               int64_t equal_run = 32) {
  std::vector<float> x = random_tensor(rows * cols, seed);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-42f, -3e-39f, 3e38f};
  for (size_t i = 0; i < x.size(); i += 29) x[i] = specials[(i / 29) % 8];
  for (int64_t i = 0; i < equal_run && i < cols; ++i) x[static_cast<size_t>(i)] = -2.75f;
  return x;
}

// Every 65537th float bit pattern (both signs, every binade, NaNs, infinities and subnormals
// among them), and the specials themselves: for codecs held against a reference.
inline std::vector<float> float_sweep() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65537)
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MIN, FLT_TRUE_MIN, FLT_MAX,
                  -FLT_TRUE_MIN, 0x1p-127f, 0x1p-149f, 0x1.000002p-127f})
    v.push_back(x);
  return v;
}

}  // namespace fp8lm
