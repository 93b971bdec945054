#pragma once
// Shared test inputs: random tensors salted with the values casts get wrong.
#include <omp.h>

#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/quantize.h"
#include "fp8lm/error.h"
#include "kernels/cpu/gemm.h"

namespace fp8lm::test {

// f throws fp8lm::Error, and its message holds needle.
inline void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The message of the Error f throws; fails the test when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

// A fresh empty directory under the test temp dir.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Central difference of f with respect to v[i], in double: the oracle every backward is
// checked against (docs/ARCHITECTURE.md: how it is tested). h = 1e-5 keeps both the truncation
// error (h^2 times the third derivative) and the rounding error (eps / h) near 1e-10 for the
// O(1) losses tests build.
template <typename F>
double central_difference(std::vector<double>& v, size_t i, F f) {
  const double h = 1e-5, saved = v[i];
  v[i] = saved + h;
  const double up = f();
  v[i] = saved - h;
  const double down = f();
  v[i] = saved;
  return (up - down) / (2 * h);
}

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
  // An empty vector's data() may be null, which memcmp must not be given even for 0 bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
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

// What the rounding errors of C = alpha op(A) op(B) + beta C0 + bias scale with, per element:
// |alpha| sum_k |a b| (no cancellation) plus |beta C0| and |bias| (row-major, gemm.h's Trans).
inline std::vector<float> gemm_magnitudes(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                                          float alpha, const std::vector<float>& A,
                                          const std::vector<float>& B, float beta,
                                          const std::vector<float>& C0, const float* bias) {
  std::vector<float> mag(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta == Trans::N ? A[m * K + k] : A[k * M + m];
        const double b = tb == Trans::N ? B[k * N + n] : B[n * K + k];
        s += std::fabs(a * b);
      }
      s = std::fabs(alpha) * s;
      if (beta != 0.0f) s += std::fabs(beta * C0[m * N + n]);
      if (bias) s += std::fabs(bias[n]);
      mag[m * N + n] = static_cast<float>(s);
    }
  }
  return mag;
}

// Inputs for FP32 -> BF16 casts: every high half (sign and exponent) with the low halves where
// rounding decides (exact, just above, just below, at and just past half way, all ones): ±0,
// subnormals, ties to even both ways, carries into the exponent and on to Inf, NaNs with payload
// bits in either half. Then `randoms` random bit patterns.
inline std::vector<float> bf16_cast_inputs(int randoms, uint32_t seed) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      x.push_back(std::bit_cast<float>(hi << 16 | lo));
  std::mt19937 rng(seed);
  for (int i = 0; i < randoms; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return x;
}

// The thread-determinism harness: run(threads) must set that many OpenMP threads and return
// what it computed. Runs with 2, 2 again, 1 and 3 threads (restoring the count after);
// results [1..3] must equal [0] bit for bit, whatever the partition of the work.
template <typename Run>
auto at_thread_counts(Run run) {
  const int saved = omp_get_max_threads();
  std::array<decltype(run(1)), 4> r = {run(2), run(2), run(1), run(3)};
  omp_set_num_threads(saved);
  return r;
}

}  // namespace fp8lm::test
