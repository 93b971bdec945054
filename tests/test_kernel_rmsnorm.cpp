// RMSNorm: the fast kernels against the double-precision reference, the reference backward
// against finite differences, the fused FP8 producer against forward-then-quantize bit for
// bit, and the same bits for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/rmsnorm.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;
using test::expect_close;
using test::random_normal;
using test::same_bits;

struct Inputs {
  Vec x, gamma, dy;
};

Inputs make_inputs(int64_t rows, int64_t C, uint32_t seed) {
  return {random_normal(rows * C, seed, 0.5f, 2.0f), random_normal(C, seed + 1, 1.0f, 0.5f),
          random_normal(rows * C, seed + 3)};
}

constexpr float kEps = 1e-5f;
const int64_t kColumns[] = {1, 7, 64, 1023, 4096};

// The fast kernel sums x² in float with 16 lanes, the reference in double. The worst case,
// (C/16 + 16) roundings, is far from what happens: independent errors grow like a random walk
// and stay within a few units of 2^-24 (relative to 1 + |value|) at these sizes. 32 units
// leaves room yet catches real slips (a mean over C - 1 moves y by 1/(2C): 2048 units at 4096).
constexpr float kRowTol = 32 * 0x1p-24f;

TEST(RmsNormForward, MatchesReferenceAcrossRowLengths) {
  for (int64_t C : kColumns) {
    const int64_t rows = 17;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C));
    Vec y(rows * C), rstd(rows), y_ref(rows * C), rstd_ref(rows);
    cpu::rmsnorm_forward(y.data(), rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
    cpu::ref::rmsnorm_forward(y_ref.data(), rstd_ref.data(), in.x.data(), in.gamma.data(), rows, C,
                              kEps);
    SCOPED_TRACE(C);
    expect_close(y, y_ref, kRowTol, kRowTol, "y");
    expect_close(rstd, rstd_ref, kRowTol, 0.0f, "rstd");
  }
}

TEST(RmsNormForward, OutputMayAliasInput) {
  const int64_t rows = 3, C = 33;
  const Inputs in = make_inputs(rows, C, 5);
  Vec y(rows * C), rstd(rows), inplace = in.x;
  cpu::rmsnorm_forward(y.data(), rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
  cpu::rmsnorm_forward(inplace.data(), rstd.data(), inplace.data(), in.gamma.data(), rows, C, kEps);
  EXPECT_TRUE(same_bits(y, inplace));
}

TEST(RmsNormBackward, MatchesReferenceAcrossRowLengths) {
  for (int64_t C : kColumns) {
    const int64_t rows = 17;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 100);
    Vec y(rows * C), rstd(rows);
    cpu::ref::rmsnorm_forward(y.data(), rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
    // Non-zero starting gradients: both must add to them.
    Vec dx = random_normal(rows * C, 7), dgamma = random_normal(C, 8);
    Vec dx_ref = dx, dgamma_ref = dgamma;
    cpu::rmsnorm_backward(dx.data(), dgamma.data(), in.dy.data(), in.x.data(), in.gamma.data(),
                          rstd.data(), rows, C);
    cpu::ref::rmsnorm_backward(dx_ref.data(), dgamma_ref.data(), in.dy.data(), in.x.data(),
                               in.gamma.data(), rstd.data(), rows, C);
    SCOPED_TRACE(C);
    expect_close(dx, dx_ref, kRowTol, kRowTol, "dx");  // the same 16-lane row sums as forward
    // A column sum over rows in float (any order) is within rows * 2^-24 * sum|terms| of the
    // exact sum; 4 more units cover the rounding of each term (xhat) and of adding the prior.
    for (int64_t c = 0; c < C; ++c) {
      double abs_sum = std::fabs(dgamma_ref[c]);
      for (int64_t r = 0; r < rows; ++r)
        abs_sum += std::fabs(static_cast<double>(in.dy[r * C + c]) * in.x[r * C + c] * rstd[r]);
      ASSERT_NEAR(dgamma[c], dgamma_ref[c], static_cast<double>(rows + 4) * 0x1p-24 * abs_sum)
          << "dgamma at column " << c;
    }
  }
}

TEST(RmsNormBackward, AccumulatesIntoDxAndDgamma) {
  const int64_t rows = 9, C = 130;
  const Inputs in = make_inputs(rows, C, 11);
  Vec y(rows * C), rstd(rows);
  cpu::rmsnorm_forward(y.data(), rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
  Vec dx(rows * C, 0.0f), dgamma(C, 0.0f);
  auto run = [&] {
    cpu::rmsnorm_backward(dx.data(), dgamma.data(), in.dy.data(), in.x.data(), in.gamma.data(),
                          rstd.data(), rows, C);
  };
  run();
  const Vec dx1 = dx, dgamma1 = dgamma;
  run();
  // From zero, a second identical call adds the same bits again: g + g = 2g exactly.
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], 2.0f * dx1[i]) << i;
  for (size_t i = 0; i < dgamma.size(); ++i) ASSERT_EQ(dgamma[i], 2.0f * dgamma1[i]) << i;
}

// RMSNorm in double, and L = sum(y * w): what the reference backward differentiates.
double rmsnorm_loss(const std::vector<double>& x, const std::vector<double>& gamma, const Vec& w,
                    int64_t rows, int64_t C, double eps) {
  double loss = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) loss += x[r * C + c] * rstd * gamma[c] * w[r * C + c];
  }
  return loss;
}

TEST(RmsNormReference, BackwardMatchesFiniteDifferences) {
  for (int64_t C : {1, 2, 7, 16}) {
    const int64_t rows = 3;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 200);
    const Vec& w = in.dy;  // dL/dy
    Vec y(rows * C), rstd(rows), dx(rows * C, 0.0f), dgamma(C, 0.0f);
    cpu::ref::rmsnorm_forward(y.data(), rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
    cpu::ref::rmsnorm_backward(dx.data(), dgamma.data(), w.data(), in.x.data(), in.gamma.data(),
                               rstd.data(), rows, C);
    std::vector<double> x(in.x.begin(), in.x.end()), gamma(in.gamma.begin(), in.gamma.end());
    auto loss = [&] { return rmsnorm_loss(x, gamma, w, rows, C, kEps); };
    // The finite differences are good to ~1e-9; the reference's float outputs and its float
    // rstd (as saved by forward) to a few 2^-24 relative.
    SCOPED_TRACE(C);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(dx[i], test::central_difference(x, i, loss), 1e-5 * (1 + std::fabs(dx[i]))) << i;
    for (size_t i = 0; i < gamma.size(); ++i)
      EXPECT_NEAR(dgamma[i], test::central_difference(gamma, i, loss),
                  1e-5 * (1 + std::fabs(dgamma[i])));
  }
}

TEST(RmsNormFp8, FusedIsBitIdenticalToForwardThenQuantize) {
  for (int64_t C : kColumns) {
    const int64_t rows = 13;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 300);
    Vec y(rows * C), rstd(rows);
    cpu::rmsnorm_forward(y.data(), rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
    for (DType f : {DType::E4M3, DType::E5M2}) {
      // 1: in range. fp8_max / 2: |y| > 2 saturates (y reaches about 4 here). 1e-3: many
      // small values flush in E4M3.
      for (float scale : {1.0f, fp8_max(f) / 2.0f, 1e-3f}) {
        std::vector<uint8_t> want(rows * C), got(rows * C, 0xaa);
        const CastStats w = quantize(want.data(), y.data(), rows * C, scale, f);
        Vec rstd2(rows);
        const CastStats g = cpu::rmsnorm_forward_fp8(got.data(), scale, f, rstd2.data(),
                                                     in.x.data(), in.gamma.data(), rows, C, kEps);
        SCOPED_TRACE(testing::Message()
                     << "C=" << C << " " << dtype_short_name(f) << " scale=" << scale);
        EXPECT_EQ(got, want);
        EXPECT_TRUE(same_bits(rstd2, rstd));
        test::expect_same_stats(g, w);
        if (scale == fp8_max(f) / 2.0f && C >= 64) {
          EXPECT_GT(g.saturated, 0);
        }
      }
    }
  }
}

// The residual add fused in front: bit-identical to adding, then the kernels above.
TEST(AddRmsNorm, FusedAddIsBitIdenticalToAddThenRmsNorm) {
  for (int64_t C : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1023}}) {
    const int64_t rows = 9;
    const Vec x = random_normal(rows * C, static_cast<uint32_t>(C) + 600, 1.0f, 2.0f);
    const Vec r = random_normal(rows * C, static_cast<uint32_t>(C) + 601);
    const Vec gamma = random_normal(C, static_cast<uint32_t>(C) + 602, 1.0f, 0.5f);
    Vec sum(rows * C), y(rows * C), rstd(rows);
    for (int64_t i = 0; i < rows * C; ++i) sum[i] = x[i] + r[i];
    cpu::rmsnorm_forward(y.data(), rstd.data(), sum.data(), gamma.data(), rows, C, 1e-5f);
    Vec s2(rows * C), y2(rows * C), rstd2(rows);
    cpu::add_rmsnorm_forward(s2.data(), y2.data(), rstd2.data(), x.data(), r.data(), gamma.data(),
                             rows, C, 1e-5f);
    SCOPED_TRACE(C);
    EXPECT_TRUE(same_bits(s2, sum));
    EXPECT_TRUE(same_bits(y2, y));
    EXPECT_TRUE(same_bits(rstd2, rstd));
    std::vector<uint8_t> want(rows * C), got(rows * C, 0xaa);
    const CastStats w = quantize(want.data(), y.data(), rows * C, 8.0f, DType::E4M3);
    Vec s3(rows * C);
    const CastStats g =
        cpu::add_rmsnorm_forward_fp8(s3.data(), got.data(), 8.0f, DType::E4M3, rstd2.data(),
                                     x.data(), r.data(), gamma.data(), rows, C, 1e-5f);
    EXPECT_TRUE(same_bits(s3, sum));
    EXPECT_EQ(got, want);
    test::expect_same_stats(g, w);
  }
}

TEST(RmsNormDeterminism, SameBitsForAnyThreadCount) {
  const int64_t rows = 67, C = 1023;  // big enough to run in parallel
  const Inputs in = make_inputs(rows, C, 400);
  struct Result {
    Vec y, rstd, dx, dgamma;
    std::vector<uint8_t> codes;
    CastStats stats;
  };
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Result r{Vec(rows * C),
             Vec(rows),
             Vec(rows * C, 0.5f),
             Vec(C, 0.25f),
             std::vector<uint8_t>(rows * C),
             {}};
    cpu::rmsnorm_forward(r.y.data(), r.rstd.data(), in.x.data(), in.gamma.data(), rows, C, kEps);
    cpu::rmsnorm_backward(r.dx.data(), r.dgamma.data(), in.dy.data(), in.x.data(), in.gamma.data(),
                          r.rstd.data(), rows, C);
    r.stats = cpu::rmsnorm_forward_fp8(r.codes.data(), 100.0f, DType::E4M3, r.rstd.data(),
                                       in.x.data(), in.gamma.data(), rows, C, kEps);
    return r;
  };
  const auto [a, b, c, d] = test::at_thread_counts(run);
  for (const Result* o : {&b, &c, &d}) {
    EXPECT_TRUE(same_bits(o->y, a.y));
    EXPECT_TRUE(same_bits(o->rstd, a.rstd));
    EXPECT_TRUE(same_bits(o->dx, a.dx));
    EXPECT_TRUE(same_bits(o->dgamma, a.dgamma));
    EXPECT_EQ(o->codes, a.codes);
    EXPECT_EQ(o->stats.amax, a.stats.amax);
    EXPECT_EQ(o->stats.saturated, a.stats.saturated);
    EXPECT_EQ(o->stats.flushed, a.stats.flushed);
  }
}

}  // namespace
}  // namespace fp8lm
