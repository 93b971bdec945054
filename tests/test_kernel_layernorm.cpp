// LayerNorm: the fast kernels against the double-precision reference, the reference backward
// against finite differences, the fused FP8 producer against forward-then-quantize bit for
// bit, and the same bits for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/layernorm.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;
using test::expect_close;
using test::random_normal;
using test::same_bits;

struct Inputs {
  Vec x, gamma, beta, dy;
};

// x has a non-zero mean so the variance is not the mean of squares.
Inputs make_inputs(int64_t rows, int64_t C, uint32_t seed) {
  return {random_normal(rows * C, seed, 1.0f, 2.0f), random_normal(C, seed + 1, 1.0f, 0.5f),
          random_normal(C, seed + 2, 0.0f, 0.5f), random_normal(rows * C, seed + 3)};
}

constexpr float kEps = 1e-5f;
const int64_t kColumns[] = {1, 7, 64, 1023, 4096};

// The fast kernel sums rows in float with 16 lanes, the reference in double. The worst case,
// (C/16 + 16) roundings, is far from what happens: with independent inputs the errors grow
// like a random walk, and the measured worst over these sizes is 4 units of 2^-24 (relative
// to 1 + |value|) at C = 4096. 32 units leaves room yet catches real slips: dividing the
// variance by C - 1 instead of C moves y by 1/(2C), 2048 units at C = 4096.
constexpr float kRowTol = 32 * 0x1p-24f;

// A column sum over rows in float (any order) is within rows * 2^-24 * sum|terms| of the exact
// sum; 4 more units cover the rounding of each term (xhat) and of adding the prior gradient.
void expect_column_sums_close(const Vec& got, const Vec& want, const std::vector<double>& abs_sum,
                              int64_t rows, const char* what) {
  for (size_t c = 0; c < got.size(); ++c) {
    const double tol = static_cast<double>(rows + 4) * 0x1p-24 * (abs_sum[c] + std::fabs(want[c]));
    ASSERT_NEAR(got[c], want[c], tol) << what << " at column " << c;
  }
}

TEST(LayerNormForward, MatchesReferenceAcrossRowLengths) {
  for (int64_t C : kColumns) {
    const int64_t rows = 17;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C));
    Vec y(rows * C), mean(rows), rstd(rows), y_ref(rows * C), mean_ref(rows), rstd_ref(rows);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.gamma.data(),
                           in.beta.data(), rows, C, kEps);
    cpu::ref::layernorm_forward(y_ref.data(), mean_ref.data(), rstd_ref.data(), in.x.data(),
                                in.gamma.data(), in.beta.data(), rows, C, kEps);
    SCOPED_TRACE(C);
    expect_close(y, y_ref, kRowTol, kRowTol, "y");
    expect_close(mean, mean_ref, kRowTol, kRowTol, "mean");
    expect_close(rstd, rstd_ref, kRowTol, 0.0f, "rstd");
  }
}

TEST(LayerNormForward, OutputMayAliasInput) {
  const int64_t rows = 3, C = 33;
  const Inputs in = make_inputs(rows, C, 5);
  Vec y(rows * C), mean(rows), rstd(rows), inplace = in.x;
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.gamma.data(),
                         in.beta.data(), rows, C, kEps);
  cpu::layernorm_forward(inplace.data(), mean.data(), rstd.data(), inplace.data(), in.gamma.data(),
                         in.beta.data(), rows, C, kEps);
  EXPECT_TRUE(same_bits(y, inplace));
}

TEST(LayerNormBackward, MatchesReferenceAcrossRowLengths) {
  for (int64_t C : kColumns) {
    const int64_t rows = 17;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 100);
    Vec y(rows * C), mean(rows), rstd(rows);
    cpu::ref::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.gamma.data(),
                                in.beta.data(), rows, C, kEps);
    // Non-zero starting gradients: both must add to them.
    Vec dx = random_normal(rows * C, 7), dgamma = random_normal(C, 8), dbeta = random_normal(C, 9);
    Vec dx_ref = dx, dgamma_ref = dgamma, dbeta_ref = dbeta;
    cpu::layernorm_backward(dx.data(), dgamma.data(), dbeta.data(), in.dy.data(), in.x.data(),
                            in.gamma.data(), mean.data(), rstd.data(), rows, C);
    cpu::ref::layernorm_backward(dx_ref.data(), dgamma_ref.data(), dbeta_ref.data(), in.dy.data(),
                                 in.x.data(), in.gamma.data(), mean.data(), rstd.data(), rows, C);
    SCOPED_TRACE(C);
    expect_close(dx, dx_ref, kRowTol, kRowTol, "dx");  // the same 16-lane row sums as forward
    std::vector<double> abs_dgamma(C, 0.0), abs_dbeta(C, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const double dyv = in.dy[r * C + c];
        abs_dgamma[c] += std::fabs(dyv * (in.x[r * C + c] - mean[r]) * rstd[r]);
        abs_dbeta[c] += std::fabs(dyv);
      }
    }
    expect_column_sums_close(dgamma, dgamma_ref, abs_dgamma, rows, "dgamma");
    expect_column_sums_close(dbeta, dbeta_ref, abs_dbeta, rows, "dbeta");
  }
}

TEST(LayerNormBackward, AccumulatesIntoDxAndParameterGradients) {
  const int64_t rows = 9, C = 130;
  const Inputs in = make_inputs(rows, C, 11);
  Vec y(rows * C), mean(rows), rstd(rows);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.gamma.data(),
                         in.beta.data(), rows, C, kEps);
  Vec dx(rows * C, 0.0f), dgamma(C, 0.0f), dbeta(C, 0.0f);
  auto run = [&] {
    cpu::layernorm_backward(dx.data(), dgamma.data(), dbeta.data(), in.dy.data(), in.x.data(),
                            in.gamma.data(), mean.data(), rstd.data(), rows, C);
  };
  run();
  const Vec dx1 = dx, dgamma1 = dgamma, dbeta1 = dbeta;
  run();
  // From zero, a second identical call adds the same bits again: g + g = 2g exactly.
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], 2.0f * dx1[i]) << i;
  for (size_t i = 0; i < dgamma.size(); ++i) {
    ASSERT_EQ(dgamma[i], 2.0f * dgamma1[i]) << i;
    ASSERT_EQ(dbeta[i], 2.0f * dbeta1[i]) << i;
  }
}

// LayerNorm in double, and L = sum(y * w): what the reference backward differentiates.
double layernorm_loss(const std::vector<double>& x, const std::vector<double>& gamma,
                      const std::vector<double>& beta, const Vec& w, int64_t rows, int64_t C,
                      double eps) {
  double loss = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c)
      loss += ((x[r * C + c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c]) * w[r * C + c];
  }
  return loss;
}

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  for (int64_t C : {1, 2, 7, 16}) {
    const int64_t rows = 3;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 200);
    const Vec& w = in.dy;  // dL/dy
    Vec y(rows * C), mean(rows), rstd(rows), dx(rows * C, 0.0f), dgamma(C, 0.0f), dbeta(C, 0.0f);
    cpu::ref::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.gamma.data(),
                                in.beta.data(), rows, C, kEps);
    cpu::ref::layernorm_backward(dx.data(), dgamma.data(), dbeta.data(), w.data(), in.x.data(),
                                 in.gamma.data(), mean.data(), rstd.data(), rows, C);
    std::vector<double> x(in.x.begin(), in.x.end()), gamma(in.gamma.begin(), in.gamma.end()),
        beta(in.beta.begin(), in.beta.end());
    auto loss = [&] { return layernorm_loss(x, gamma, beta, w, rows, C, kEps); };
    // The finite differences are good to ~1e-9; the reference's float outputs and its float
    // mean and rstd (as saved by forward) to a few 2^-24 relative.
    SCOPED_TRACE(C);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(dx[i], test::central_difference(x, i, loss), 1e-5 * (1 + std::fabs(dx[i]))) << i;
    for (size_t i = 0; i < gamma.size(); ++i) {
      EXPECT_NEAR(dgamma[i], test::central_difference(gamma, i, loss),
                  1e-5 * (1 + std::fabs(dgamma[i])));
      EXPECT_NEAR(dbeta[i], test::central_difference(beta, i, loss),
                  1e-5 * (1 + std::fabs(dbeta[i])));
    }
  }
}

TEST(LayerNormFp8, FusedIsBitIdenticalToForwardThenQuantize) {
  for (int64_t C : kColumns) {
    const int64_t rows = 13;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 300);
    Vec y(rows * C), mean(rows), rstd(rows);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.gamma.data(),
                           in.beta.data(), rows, C, kEps);
    for (DType f : {DType::E4M3, DType::E5M2}) {
      // 1: in range. fp8_max / 2: |y| > 2 saturates (y reaches about 4 here). 1e-3: many
      // small values flush in E4M3.
      for (float scale : {1.0f, fp8_max(f) / 2.0f, 1e-3f}) {
        std::vector<uint8_t> want(rows * C), got(rows * C, 0xaa);
        const CastStats w = quantize(want.data(), y.data(), rows * C, scale, f);
        Vec mean2(rows), rstd2(rows);
        const CastStats g =
            cpu::layernorm_forward_fp8(got.data(), scale, f, mean2.data(), rstd2.data(),
                                       in.x.data(), in.gamma.data(), in.beta.data(), rows, C, kEps);
        SCOPED_TRACE(testing::Message()
                     << "C=" << C << " " << dtype_short_name(f) << " scale=" << scale);
        EXPECT_EQ(got, want);
        EXPECT_TRUE(same_bits(mean2, mean));
        EXPECT_TRUE(same_bits(rstd2, rstd));
        test::expect_same_stats(g, w);
        if (scale == fp8_max(f) / 2.0f && C >= 64) {
          EXPECT_GT(g.saturated, 0);
        }
      }
    }
  }
}

// The residual add fused in front (--no-fusion runs add, then the kernels above): the same
// sum and the same outputs bit for bit, FP32 and FP8.
TEST(AddLayerNorm, FusedAddIsBitIdenticalToAddThenLayerNorm) {
  for (int64_t C : kColumns) {
    const int64_t rows = 9;
    const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 500);
    const Vec r = random_normal(rows * C, static_cast<uint32_t>(C) + 501);
    Vec sum(rows * C), y(rows * C), mean(rows), rstd(rows);
    for (int64_t i = 0; i < rows * C; ++i) sum[i] = in.x[i] + r[i];
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), sum.data(), in.gamma.data(),
                           in.beta.data(), rows, C, kEps);
    Vec s2(rows * C), y2(rows * C), mean2(rows), rstd2(rows);
    cpu::add_layernorm_forward(s2.data(), y2.data(), mean2.data(), rstd2.data(), in.x.data(),
                               r.data(), in.gamma.data(), in.beta.data(), rows, C, kEps);
    SCOPED_TRACE(C);
    EXPECT_TRUE(same_bits(s2, sum));
    EXPECT_TRUE(same_bits(y2, y));
    EXPECT_TRUE(same_bits(mean2, mean));
    EXPECT_TRUE(same_bits(rstd2, rstd));
    const float scale = 8.0f;
    std::vector<uint8_t> want(rows * C), got(rows * C, 0xaa);
    const CastStats w = quantize(want.data(), y.data(), rows * C, scale, DType::E4M3);
    Vec s3(rows * C);
    const CastStats g = cpu::add_layernorm_forward_fp8(
        s3.data(), got.data(), scale, DType::E4M3, mean2.data(), rstd2.data(), in.x.data(),
        r.data(), in.gamma.data(), in.beta.data(), rows, C, kEps);
    EXPECT_TRUE(same_bits(s3, sum));
    EXPECT_EQ(got, want);
    test::expect_same_stats(g, w);
  }
}

TEST(LayerNormDeterminism, SameBitsForAnyThreadCount) {
  const int64_t rows = 67, C = 1023;  // big enough to run in parallel
  const Inputs in = make_inputs(rows, C, 400);
  struct Result {
    Vec y, mean, rstd, dx, dgamma, dbeta;
    std::vector<uint8_t> codes;
    CastStats stats;
  };
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Result r{Vec(rows * C),
             Vec(rows),
             Vec(rows),
             Vec(rows * C, 0.5f),
             Vec(C, 0.25f),
             Vec(C, -0.25f),
             std::vector<uint8_t>(rows * C),
             {}};
    cpu::layernorm_forward(r.y.data(), r.mean.data(), r.rstd.data(), in.x.data(), in.gamma.data(),
                           in.beta.data(), rows, C, kEps);
    cpu::layernorm_backward(r.dx.data(), r.dgamma.data(), r.dbeta.data(), in.dy.data(), in.x.data(),
                            in.gamma.data(), r.mean.data(), r.rstd.data(), rows, C);
    r.stats = cpu::layernorm_forward_fp8(r.codes.data(), 100.0f, DType::E4M3, r.mean.data(),
                                         r.rstd.data(), in.x.data(), in.gamma.data(),
                                         in.beta.data(), rows, C, kEps);
    return r;
  };
  const auto [a, b, c, d] = test::at_thread_counts(run);
  for (const Result* o : {&b, &c, &d}) {
    EXPECT_TRUE(same_bits(o->y, a.y));
    EXPECT_TRUE(same_bits(o->mean, a.mean));
    EXPECT_TRUE(same_bits(o->rstd, a.rstd));
    EXPECT_TRUE(same_bits(o->dx, a.dx));
    EXPECT_TRUE(same_bits(o->dgamma, a.dgamma));
    EXPECT_TRUE(same_bits(o->dbeta, a.dbeta));
    EXPECT_EQ(o->codes, a.codes);
    EXPECT_EQ(o->stats.amax, a.stats.amax);
    EXPECT_EQ(o->stats.saturated, a.stats.saturated);
    EXPECT_EQ(o->stats.flushed, a.stats.flushed);
  }
}

}  // namespace
}  // namespace fp8lm
