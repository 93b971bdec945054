// Fused softmax + cross-entropy: the fast kernel against the double-precision reference,
// gradients against finite differences, ignored rows, huge logits, dlogits aliasing logits,
// optional outputs, bad targets, and the same bits for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "fp8lm/error.h"
#include "kernels/cpu/cross_entropy.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;
using test::same_bits;
using Targets = std::vector<int32_t>;

Vec random_normal(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Targets in [0, V), with every fifth row ignored (alternating the -1 and -100 conventions).
Targets random_targets(int64_t rows, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(V) - 1);
  Targets t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 3 ? (r % 2 ? -1 : -100) : d(rng);
  return t;
}

int64_t counted(const Targets& t) {
  int64_t n = 0;
  for (int32_t v : t) n += v >= 0;
  return n;
}

const int64_t kVocabs[] = {1, 7, 64, 1023, 4096};

// The fast kernel sums exponentials in float with 16 lanes, the reference in double. The
// worst case, (V/16 + 16) roundings of the sum, is far from what happens: independent errors
// grow like a random walk, and the measured worst here is a few units of 2^-24. 32 units,
// relative to 1 + |value| (a probability's error is absolute: exp(x - m) carries the
// rounding of x - m, at most 2^-24 / e in absolute terms), leaves room yet catches e.g. a
// gradient that forgot the one-hot (an error of grad_scale).
constexpr double kTol = 32 * 0x1p-24;

struct Result {
  Vec dlogits, losses;
  float mean;
};

Result run_fast(const Vec& logits, const Targets& t, int64_t V, float grad_scale) {
  const int64_t rows = static_cast<int64_t>(t.size());
  Result r{Vec(rows * V, NAN), Vec(rows, NAN), 0.0f};  // NaN: every element must be written
  r.mean = cpu::softmax_cross_entropy(r.dlogits.data(), r.losses.data(), logits.data(), t.data(),
                                      rows, V, grad_scale);
  return r;
}

Result run_ref(const Vec& logits, const Targets& t, int64_t V, float grad_scale) {
  const int64_t rows = static_cast<int64_t>(t.size());
  Result r{Vec(rows * V, NAN), Vec(rows, NAN), 0.0f};
  r.mean = cpu::ref::softmax_cross_entropy(r.dlogits.data(), r.losses.data(), logits.data(),
                                           t.data(), rows, V, grad_scale);
  return r;
}

void expect_close(const Result& got, const Result& want, float grad_scale) {
  for (size_t r = 0; r < want.losses.size(); ++r)
    ASSERT_NEAR(got.losses[r], want.losses[r], kTol * (1 + std::fabs(want.losses[r]))) << r;
  EXPECT_NEAR(got.mean, want.mean, kTol * (1 + std::fabs(want.mean)));
  for (size_t i = 0; i < want.dlogits.size(); ++i) {
    ASSERT_NEAR(got.dlogits[i], want.dlogits[i], kTol * (grad_scale + std::fabs(want.dlogits[i])))
        << "element " << i;
  }
}

TEST(CrossEntropy, MatchesReferenceAcrossVocabularySizes) {
  for (int64_t V : kVocabs) {
    const int64_t rows = 11;
    const Targets t = random_targets(rows, V, static_cast<uint32_t>(V));
    const Vec logits = random_normal(rows * V, static_cast<uint32_t>(V) + 1, 3.0f);
    const float grad_scale = 1.0f / static_cast<float>(counted(t));
    SCOPED_TRACE(V);
    expect_close(run_fast(logits, t, V, grad_scale), run_ref(logits, t, V, grad_scale), grad_scale);
  }
}

// The unfused twin (--no-fusion) against the same reference. Its loss, -log p_t with p_t
// rounded to float first, carries p_t's relative rounding (up to 2^-24 plus the sum's) as an
// absolute error: within the same 32 units at these well-conditioned logits.
TEST(CrossEntropyUnfused, MatchesReferenceAcrossVocabularySizes) {
  for (int64_t V : kVocabs) {
    const int64_t rows = 11;
    const Targets t = random_targets(rows, V, static_cast<uint32_t>(V));
    const Vec logits = random_normal(rows * V, static_cast<uint32_t>(V) + 1, 3.0f);
    const float grad_scale = 1.0f / static_cast<float>(counted(t));
    Result got{Vec(rows * V, NAN), Vec(rows, 0.0f), 0.0f};
    Vec probs(rows * V, NAN);
    got.mean = cpu::softmax_cross_entropy_unfused(got.dlogits.data(), probs.data(), logits.data(),
                                                  t.data(), rows, V, grad_scale);
    const Result want = run_ref(logits, t, V, grad_scale);
    SCOPED_TRACE(V);
    EXPECT_NEAR(got.mean, want.mean, kTol * (1 + std::fabs(want.mean)));
    for (size_t i = 0; i < want.dlogits.size(); ++i) {
      ASSERT_NEAR(got.dlogits[i], want.dlogits[i], kTol * (grad_scale + std::fabs(want.dlogits[i])))
          << "element " << i;
    }
  }
}

TEST(CrossEntropy, IgnoredRowsHaveNoLossAndZeroGradient) {
  const int64_t rows = 4, V = 33;
  const Vec logits = random_normal(rows * V, 2);
  const Targets t = {5, -1, 7, -100};
  const Result got = run_fast(logits, t, V, 1.0f);
  for (int64_t r : {1, 3}) {
    EXPECT_EQ(got.losses[r], 0.0f);
    for (int64_t i = 0; i < V; ++i) ASSERT_EQ(got.dlogits[r * V + i], 0.0f) << r;
  }
  // The mean is over the two counted rows only.
  EXPECT_FLOAT_EQ(got.mean, (got.losses[0] + got.losses[2]) / 2);

  const Targets none = {-1, -1, -1, -1};
  const Result empty = run_fast(logits, none, V, 1.0f);
  EXPECT_EQ(empty.mean, 0.0f);  // not 0/0
  for (float d : empty.dlogits) ASSERT_EQ(d, 0.0f);
}

TEST(CrossEntropy, GradientRowsSumToZeroAndLossOfUniformIsLogV) {
  const int64_t rows = 3, V = 1000;
  const Vec logits(rows * V, 0.25f);
  const Targets t = {0, 999, 500};
  const Result got = run_fast(logits, t, V, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(got.losses[r], std::log(1000.0), kTol * 8);
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += got.dlogits[r * V + i];
    EXPECT_NEAR(sum, 0.0, kTol * 4);  // softmax sums to 1, the one-hot takes 1 away
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  for (int64_t V : {7, 1023}) {
    const int64_t rows = 6;
    Vec logits = random_normal(rows * V, 3, 1e4f);          // exp(1e4) would overflow a float
    for (int64_t i = 0; i < V; ++i) logits[i] = 1e4f;       // a row of equal huge logits
    for (int64_t i = 0; i < V; ++i) logits[V + i] = -1e4f;  // and of equal hugely negative
    const Targets t = {1, 2, 0, 3, 4, 5};
    const Result got = run_fast(logits, t, V, 0.5f);
    for (float l : got.losses) ASSERT_TRUE(std::isfinite(l));
    for (float d : got.dlogits) ASSERT_TRUE(std::isfinite(d));
    EXPECT_NEAR(got.losses[0], std::log(static_cast<double>(V)), kTol * 8);
    EXPECT_NEAR(got.losses[1], std::log(static_cast<double>(V)), kTol * 8);
    // x - m is rounded to float's spacing at 1e4 (about 1e-3), so a loss of size ~1e4 is good
    // to about that much relative to itself: kTol * (1 + |loss|) still holds.
    expect_close(got, run_ref(logits, t, V, 0.5f), 0.5f);
  }
}

TEST(CrossEntropy, DlogitsMayAliasLogits) {
  for (int64_t V : {1, 7, 1023, 4096}) {
    const int64_t rows = 9;
    const Targets t = random_targets(rows, V, 4);
    const Vec logits = random_normal(rows * V, 5, 3.0f);
    const Result separate = run_fast(logits, t, V, 0.25f);
    Vec inplace = logits, losses(rows);
    const float mean = cpu::softmax_cross_entropy(inplace.data(), losses.data(), inplace.data(),
                                                  t.data(), rows, V, 0.25f);
    EXPECT_TRUE(same_bits(inplace, separate.dlogits)) << V;
    EXPECT_TRUE(same_bits(losses, separate.losses)) << V;
    EXPECT_EQ(mean, separate.mean);
  }
}

TEST(CrossEntropy, OptionalOutputsDoNotChangeTheLoss) {
  const int64_t rows = 9, V = 1023;
  const Targets t = random_targets(rows, V, 6);
  const Vec logits = random_normal(rows * V, 7, 3.0f);
  const Result full = run_fast(logits, t, V, 1.0f);
  Vec losses(rows);
  // Without dlogits the exponentials are summed on the fly: the same values in the same order.
  const float no_grad =
      cpu::softmax_cross_entropy(nullptr, losses.data(), logits.data(), t.data(), rows, V, 1.0f);
  EXPECT_TRUE(same_bits(losses, full.losses));
  EXPECT_EQ(no_grad, full.mean);
  const float neither =
      cpu::softmax_cross_entropy(nullptr, nullptr, logits.data(), t.data(), rows, V, 1.0f);
  EXPECT_EQ(neither, full.mean);
}

TEST(CrossEntropy, RejectsTargetOutsideVocabulary) {
  const int64_t rows = 2, V = 5;
  const Vec logits(rows * V, 0.0f);
  const Targets t = {1, 5};
  Vec dlogits(rows * V, 7.0f);
  EXPECT_THROW(
      cpu::softmax_cross_entropy(dlogits.data(), nullptr, logits.data(), t.data(), rows, V, 1.0f),
      Error);
  for (float d : dlogits) EXPECT_EQ(d, 7.0f);  // nothing written
  EXPECT_THROW(
      cpu::ref::softmax_cross_entropy(nullptr, nullptr, logits.data(), t.data(), rows, V, 1.0f),
      Error);
}

// grad_scale * sum of the counted rows' -log softmax(target), all in double.
double total_loss(const std::vector<double>& x, const Targets& t, int64_t V, double grad_scale) {
  double total = 0.0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] < 0) continue;
    const double* row = x.data() + r * V;
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(row[i]);
    total += std::log(sum) - row[t[r]];
  }
  return grad_scale * total;
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const int64_t V = 7;
  const Targets t = {3, -1, 0, 6};
  const int64_t rows = static_cast<int64_t>(t.size());
  const float grad_scale = 1.0f / 3;
  const Vec logits = random_normal(rows * V, 8, 2.0f);
  std::vector<double> x(logits.begin(), logits.end());
  const Result ref = run_ref(logits, t, V, grad_scale);
  const Result fast = run_fast(logits, t, V, grad_scale);
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-5, saved = x[i];
    x[i] = saved + h;
    const double up = total_loss(x, t, V, grad_scale);
    x[i] = saved - h;
    const double down = total_loss(x, t, V, grad_scale);
    x[i] = saved;
    const double fd = (up - down) / (2 * h);
    // Differences good to ~1e-10; the reference rounds once to float, the fast kernel within
    // kTol (see above).
    EXPECT_NEAR(ref.dlogits[i], fd, 1e-7) << i;
    EXPECT_NEAR(fast.dlogits[i], fd, 1e-7 + kTol * grad_scale) << i;
  }
}

TEST(CrossEntropyDeterminism, SameBitsForAnyThreadCount) {
  const int64_t rows = 64, V = 1023;  // big enough to run in parallel
  const Targets t = random_targets(rows, V, 9);
  const Vec logits = random_normal(rows * V, 10, 3.0f);
  const auto [a, b, c, d] = test::at_thread_counts([&](int threads) {
    omp_set_num_threads(threads);
    return run_fast(logits, t, V, 0.1f);
  });
  for (const Result* o : {&b, &c, &d}) {
    EXPECT_TRUE(same_bits(o->dlogits, a.dlogits));
    EXPECT_TRUE(same_bits(o->losses, a.losses));
    EXPECT_EQ(o->mean, a.mean);
  }
}

}  // namespace
}  // namespace fp8lm
