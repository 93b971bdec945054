// The optimizer on the CPU: AdamW's update in AVX-512 (optimizer_isa.h) against its scalar twin
// (kernels/adamw_ops.h's adamw::update, one element at a time) bit for bit, with FP32 and BF16
// gradients, lengths that end in a partial vector, with and without weight decay, and values
// at the edges (zeros, subnormal and huge gradients, Inf and NaN): both take the same IEEE
// operations in the same order, so nothing may differ, NaNs included, nor the BF16 copy of the
// new weights it writes where asked (bf16_from_float's bits); and grad_norm's partial
// sums, eight chunks in the lanes of a vector, against its scalar loop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/cpu_features.h"
#include "kernels/adamw_ops.h"
#include "kernels/cpu/optimizer_isa.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;

// Gradients from N(0, 1) with edge values spread through them.
Vec gradients(int64_t n, uint32_t seed) {
  Vec g = test::random_normal(n, seed);
  const float edges[] = {0.0f,
                         -0.0f,
                         1e-40f,
                         -3e-39f,
                         3e38f,
                         -1e30f,
                         std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(edges); ++i)
    if (static_cast<int64_t>(7 * i + 3) < n) g[7 * i + 3] = edges[i];
  return g;
}

template <class G>
void expect_same_update(const std::vector<G>& g, float grad_scale, float decay) {
  const auto n = static_cast<int64_t>(g.size());
  const AdamWHyper h{
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .bc1 = 0.19f, .bc2 = 0.0975f};
  const Vec w0 = test::random_normal(n, 11), m0 = test::random_normal(n, 12);
  Vec v0 = test::random_normal(n, 13);
  for (float& x : v0) x = x * x;  // a second moment is not negative
  Vec w = w0, m = m0, v = v0;
  for (int64_t j = 0; j < n; ++j) {
    float gj;
    if constexpr (std::is_same_v<G, bf16_t>) {
      gj = bf16_to_float(g[j]);
    } else {
      gj = g[j];
    }
    adamw::update(w[j], m[j], v[j], gj * grad_scale, h, decay);
  }
  // Without the BF16 copy, and with it (the weights' bf16_from_float, Inf and NaN included).
  for (const bool copy : {false, true}) {
    Vec w1 = w0, m1 = m0, v1 = v0;
    std::vector<bf16_t> w16(g.size(), 0x7777);
    cpu::avx512::adamw_update(w1.data(), m1.data(), v1.data(), g.data(), n, grad_scale, h, decay,
                              copy ? w16.data() : nullptr);
    EXPECT_TRUE(test::same_bits(w1, w)) << "weights, n " << n;
    EXPECT_TRUE(test::same_bits(m1, m)) << "first moments, n " << n;
    EXPECT_TRUE(test::same_bits(v1, v)) << "second moments, n " << n;
    for (int64_t j = 0; j < n; ++j) {
      const bf16_t want = copy ? bf16_from_float(w[j]) : bf16_t{0x7777};
      ASSERT_EQ(w16[j], want) << "the BF16 copy at " << j << " of " << n << ", copy " << copy;
    }
  }
}

TEST(AdamWUpdate, Avx512GivesTheScalarTwinsBits) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (const int64_t n : {1, 15, 16, 17, 1000, 16384}) {
    const Vec g = gradients(n, static_cast<uint32_t>(n));
    std::vector<bf16_t> g16(g.size());
    for (size_t i = 0; i < g.size(); ++i) g16[i] = bf16_from_float(g[i]);
    for (const float decay : {0.0f, 0.1f}) {
      expect_same_update(g, 0.5f, decay);
      expect_same_update(g16, 1.0f, decay);
    }
  }
}

// grad_norm's partial sums, eight chunks at a time: each lane the scalar loop's sum of the same
// chunk, bit for bit, whatever the chunks' lengths (a common part in vectors, each rest after).
TEST(GradNormPartials, EightChunksAtOnceGiveEachChunksScalarSum) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t lengths[][8] = {{16384, 16384, 16384, 16384, 16384, 16384, 16384, 16384},
                                {16384, 5, 16384, 777, 16384, 16384, 1, 16384},
                                {3, 8, 9, 15, 16, 17, 64, 100}};
  for (const auto& n : lengths) {
    std::vector<Vec> g;
    const float* ptr[8];
    for (int i = 0; i < 8; ++i) {
      g.push_back(test::random_normal(n[i], static_cast<uint32_t>(40 + i), 0.0f, 1e-3f));
      ptr[i] = g.back().data();
    }
    double got[8];
    cpu::avx512::sum_of_squares_8(got, ptr, n);
    for (int i = 0; i < 8; ++i) {
      double want = 0.0;
      for (int64_t j = 0; j < n[i]; ++j) {
        const double v = g[static_cast<size_t>(i)][static_cast<size_t>(j)];
        want += v * v;
      }
      EXPECT_EQ(std::memcmp(&got[i], &want, sizeof(double)), 0)
          << "chunk " << i << " of " << n[i] << ": " << got[i] << " vs " << want;
    }
  }
}

}  // namespace
}  // namespace fp8lm
