// Token + position embeddings: the fast kernels against the double-precision reference (with
// tokens repeated many times), the reference backward against finite differences, and the
// same bits for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;
using test::same_bits;
using Tokens = std::vector<int32_t>;

Vec random_normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

Tokens random_tokens(int64_t n, int32_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, V - 1);
  Tokens t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

const int64_t kColumns[] = {1, 7, 64, 1023, 4096};

TEST(EmbeddingForward, MatchesReferenceExactly) {
  for (int64_t C : kColumns) {
    const int64_t B = 3, T = 5;
    const int32_t V = 11;
    const Tokens tokens = random_tokens(B * T, V, 1);
    const Vec wte = random_normal(V * C, 2), wpe = random_normal(T * C, 3);
    Vec out(B * T * C), out_ref(B * T * C);
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    cpu::ref::embedding_forward(out_ref.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    // One float addition per element: correctly rounded in both.
    EXPECT_TRUE(same_bits(out, out_ref)) << C;
  }
}

TEST(EmbeddingBackward, MatchesReferenceWithRepeatedTokens) {
  for (int64_t C : kColumns) {
    const int64_t B = 4, T = 10;
    const int32_t V = 6;  // 40 positions over 6 tokens: every token repeats
    Tokens tokens = random_tokens(B * T, V - 1, 4);  // token V - 1 never occurs
    for (int64_t t = 0; t < T; ++t) tokens[t] = 2;   // one sequence of a single token
    const Vec dout = random_normal(B * T * C, 5);
    // Non-zero starting gradients: both must add to them.
    Vec dwte = random_normal(V * C, 6), dwpe = random_normal(T * C, 7);
    Vec dwte_ref = dwte, dwpe_ref = dwpe;
    const Vec dwte0 = dwte;
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    cpu::ref::embedding_backward(dwte_ref.data(), dwpe_ref.data(), dout.data(), tokens.data(), B, T,
                                 C);
    SCOPED_TRACE(C);
    // A float sum of k terms and the prior value (any order) is within (k + 1) * 2^-24 *
    // sum|terms| of the exact sum. Bound each element by its own terms.
    Vec abs_wte(V * C, 0.0f), abs_wpe(T * C, 0.0f);
    std::vector<int64_t> count(V, 0);
    for (int64_t p = 0; p < B * T; ++p) {
      ++count[tokens[p]];
      for (int64_t c = 0; c < C; ++c) {
        abs_wte[tokens[p] * C + c] += std::fabs(dout[p * C + c]);
        abs_wpe[(p % T) * C + c] += std::fabs(dout[p * C + c]);
      }
    }
    for (int64_t i = 0; i < V * C; ++i) {
      const double tol =
          static_cast<double>(count[i / C] + 1) * 0x1p-24 * (abs_wte[i] + std::fabs(dwte_ref[i]));
      ASSERT_NEAR(dwte[i], dwte_ref[i], tol) << "dwte " << i;
    }
    for (int64_t i = 0; i < T * C; ++i) {
      const double tol =
          static_cast<double>(B + 1) * 0x1p-24 * (abs_wpe[i] + std::fabs(dwpe_ref[i]));
      ASSERT_NEAR(dwpe[i], dwpe_ref[i], tol) << "dwpe " << i;
    }
    // The row of the token that never occurs is untouched.
    EXPECT_EQ(std::memcmp(dwte.data() + (V - 1) * C, dwte0.data() + (V - 1) * C, C * sizeof(float)),
              0);
  }
}

TEST(EmbeddingBackward, AccumulatesAcrossCalls) {
  // Distinct tokens and B = 1: each gradient element receives exactly one term per call (with
  // repeats the terms are added one by one onto the running value; the comparison against the
  // reference from non-zero gradients covers that).
  const int64_t B = 1, T = 3, C = 5;
  const Tokens tokens = {2, 0, 1};
  const Vec dout = random_normal(B * T * C, 8);
  Vec dwte(3 * C, 0.0f), dwpe(T * C, 0.0f);
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  const Vec dwte1 = dwte, dwpe1 = dwpe;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  // From zero, a second identical call adds the same bits again: g + g = 2g exactly.
  for (size_t i = 0; i < dwte.size(); ++i) ASSERT_EQ(dwte[i], 2.0f * dwte1[i]) << i;
  for (size_t i = 0; i < dwpe.size(); ++i) ASSERT_EQ(dwpe[i], 2.0f * dwpe1[i]) << i;
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  const int64_t B = 3, T = 4, C = 5;
  const int32_t V = 4;
  const Tokens tokens = random_tokens(B * T, V, 9);
  const Vec w = random_normal(B * T * C, 10);
  const Vec wte_f = random_normal(V * C, 11), wpe_f = random_normal(T * C, 12);
  std::vector<double> wte(wte_f.begin(), wte_f.end()), wpe(wpe_f.begin(), wpe_f.end());
  auto loss = [&] {  // L = sum(out * w), out computed in double
    double l = 0.0;
    for (int64_t p = 0; p < B * T; ++p)
      for (int64_t c = 0; c < C; ++c)
        l += (wte[tokens[p] * C + c] + wpe[(p % T) * C + c]) * w[p * C + c];
    return l;
  };
  Vec dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  cpu::ref::embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  // L is linear, so the differences are exact up to double rounding (~1e-10); the reference
  // rounds its sums to float once.
  for (size_t i = 0; i < wte.size(); ++i)
    EXPECT_NEAR(dwte[i], test::central_difference(wte, i, loss), 1e-6 * (1 + std::fabs(dwte[i])))
        << i;
  for (size_t i = 0; i < wpe.size(); ++i)
    EXPECT_NEAR(dwpe[i], test::central_difference(wpe, i, loss), 1e-6 * (1 + std::fabs(dwpe[i])))
        << i;
}

TEST(EmbeddingDeterminism, SameBitsForAnyThreadCount) {
  const int64_t B = 8, T = 64, C = 1023;  // big enough to run in parallel
  const int32_t V = 50;                   // 512 positions over 50 tokens
  const Tokens tokens = random_tokens(B * T, V, 13);
  const Vec wte = random_normal(V * C, 14), wpe = random_normal(T * C, 15);
  const Vec dout = random_normal(B * T * C, 16);
  struct Result {
    Vec out, dwte, dwpe;
  };
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Result r{Vec(B * T * C), Vec(V * C, 0.5f), Vec(T * C, -0.5f)};
    cpu::embedding_forward(r.out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    cpu::embedding_backward(r.dwte.data(), r.dwpe.data(), dout.data(), tokens.data(), B, T, C);
    return r;
  };
  const auto [a, b, c, d] = test::at_thread_counts(run);
  for (const Result* o : {&b, &c, &d}) {
    EXPECT_TRUE(same_bits(o->out, a.out));
    EXPECT_TRUE(same_bits(o->dwte, a.dwte));
    EXPECT_TRUE(same_bits(o->dwpe, a.dwpe));
  }
}

}  // namespace
}  // namespace fp8lm
