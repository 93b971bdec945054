// The normalizations (every entry of FP8LM_NORMALIZATIONS): the fast kernels against the
// double-precision reference, the reference backward against finite differences, the fused
// FP8 producer and the fused residual add against the unfused kernels bit for bit, and the same
// bits for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/norms.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;
using test::expect_close;
using test::random_normal;
using test::same_bits;

std::vector<Normalization> all_normalizations() {
  std::vector<Normalization> v;
#define FP8LM_NORMALIZATION_ITEM(e, name) v.push_back(Normalization::e);
  FP8LM_NORMALIZATIONS(FP8LM_NORMALIZATION_ITEM)
#undef FP8LM_NORMALIZATION_ITEM
  return v;
}
const std::vector<Normalization> kKinds = all_normalizations();

struct Inputs {
  Vec x, gamma, beta, dy;
};

// x has a non-zero mean so LayerNorm's variance is not the mean of squares.
Inputs make_inputs(int64_t rows, int64_t C, uint32_t seed) {
  return {random_normal(rows * C, seed, 1.0f, 2.0f), random_normal(C, seed + 1, 1.0f, 0.5f),
          random_normal(C, seed + 2, 0.0f, 0.5f), random_normal(rows * C, seed + 3)};
}

// Every output of a forward and a backward, so one comparison covers them all.
struct Outputs {
  Outputs(int64_t rows, int64_t C)
      : y(rows * C),
        mean(rows),
        rstd(rows),
        dx(rows * C, 0.5f),
        dgamma(C, 0.25f),
        dbeta(C, -0.25f) {}
  Vec y, mean, rstd, dx, dgamma, dbeta;
  void zero_gradients() {
    for (Vec* g : {&dx, &dgamma, &dbeta}) g->assign(g->size(), 0.0f);
  }
};

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

void forward(Normalization kind, Outputs& o, const Inputs& in, int64_t rows, int64_t C) {
  cpu::norm_forward(kind, o.y.data(), nullptr, o.mean.data(), o.rstd.data(), in.x.data(), nullptr,
                    in.gamma.data(), in.beta.data(), rows, C, kEps);
}
void backward(Normalization kind, Outputs& o, const Inputs& in, int64_t rows, int64_t C) {
  cpu::norm_backward(kind, o.dx.data(), o.dgamma.data(), o.dbeta.data(), in.dy.data(), in.x.data(),
                     in.gamma.data(), o.mean.data(), o.rstd.data(), rows, C);
}

TEST(NormForward, MatchesReferenceAcrossRowLengths) {
  for (const Normalization kind : kKinds) {
    for (int64_t C : kColumns) {
      const int64_t rows = 17;
      const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C));
      Outputs got(rows, C), want(rows, C);
      forward(kind, got, in, rows, C);
      cpu::ref::norm_forward(kind, want.y.data(), want.mean.data(), want.rstd.data(), in.x.data(),
                             in.gamma.data(), in.beta.data(), rows, C, kEps);
      SCOPED_TRACE(testing::Message() << normalization_name(kind) << " C=" << C);
      expect_close(got.y, want.y, kRowTol, kRowTol, "y");
      expect_close(got.rstd, want.rstd, kRowTol, 0.0f, "rstd");
      if (normalization_centred(kind)) expect_close(got.mean, want.mean, kRowTol, kRowTol, "mean");
    }
  }
}

TEST(NormForward, OutputMayAliasInput) {
  for (const Normalization kind : kKinds) {
    const int64_t rows = 3, C = 33;
    Inputs in = make_inputs(rows, C, 5);
    Outputs o(rows, C);
    forward(kind, o, in, rows, C);
    cpu::norm_forward(kind, in.x.data(), nullptr, o.mean.data(), o.rstd.data(), in.x.data(),
                      nullptr, in.gamma.data(), in.beta.data(), rows, C, kEps);
    EXPECT_TRUE(same_bits(o.y, in.x)) << normalization_name(kind);
  }
}

TEST(NormBackward, MatchesReferenceAcrossRowLengths) {
  for (const Normalization kind : kKinds) {
    for (int64_t C : kColumns) {
      const int64_t rows = 17;
      const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 100);
      // Non-zero starting gradients (Outputs' own): both must add to them.
      Outputs got(rows, C);
      cpu::ref::norm_forward(kind, got.y.data(), got.mean.data(), got.rstd.data(), in.x.data(),
                             in.gamma.data(), in.beta.data(), rows, C, kEps);
      Outputs want = got;
      backward(kind, got, in, rows, C);
      cpu::ref::norm_backward(kind, want.dx.data(), want.dgamma.data(), want.dbeta.data(),
                              in.dy.data(), in.x.data(), in.gamma.data(), want.mean.data(),
                              want.rstd.data(), rows, C);
      SCOPED_TRACE(testing::Message() << normalization_name(kind) << " C=" << C);
      expect_close(got.dx, want.dx, kRowTol, kRowTol, "dx");  // the same row sums as forward
      const bool centred = normalization_centred(kind);
      std::vector<double> abs_dgamma(C, 0.0), abs_dbeta(C, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          const double dyv = in.dy[r * C + c];
          abs_dgamma[c] +=
              std::fabs(dyv * (in.x[r * C + c] - (centred ? got.mean[r] : 0.0)) * got.rstd[r]);
          abs_dbeta[c] += std::fabs(dyv);
        }
      }
      expect_column_sums_close(got.dgamma, want.dgamma, abs_dgamma, rows, "dgamma");
      if (centred)
        expect_column_sums_close(got.dbeta, want.dbeta, abs_dbeta, rows, "dbeta");
      else
        EXPECT_TRUE(same_bits(got.dbeta, Vec(C, -0.25f))) << "RMSNorm has no beta";
    }
  }
}

TEST(NormBackward, AccumulatesIntoDxAndParameterGradients) {
  for (const Normalization kind : kKinds) {
    const int64_t rows = 9, C = 130;
    const Inputs in = make_inputs(rows, C, 11);
    Outputs o(rows, C);
    forward(kind, o, in, rows, C);
    o.zero_gradients();
    backward(kind, o, in, rows, C);
    const Outputs once = o;
    backward(kind, o, in, rows, C);
    // From zero, a second identical call adds the same bits again: g + g = 2g exactly.
    SCOPED_TRACE(normalization_name(kind));
    for (size_t i = 0; i < o.dx.size(); ++i) ASSERT_EQ(o.dx[i], 2.0f * once.dx[i]) << i;
    for (int64_t i = 0; i < C; ++i) {
      ASSERT_EQ(o.dgamma[i], 2.0f * once.dgamma[i]) << i;
      ASSERT_EQ(o.dbeta[i], 2.0f * once.dbeta[i]) << i;
    }
  }
}

// The normalization in double, and L = sum(y * w): what the reference backward differentiates.
double norm_loss(bool centred, const std::vector<double>& x, const std::vector<double>& gamma,
                 const std::vector<double>& beta, const Vec& w, int64_t rows, int64_t C,
                 double eps) {
  double loss = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean = centred ? mean / static_cast<double>(C) : 0.0;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double y = (x[r * C + c] - mean) / std::sqrt(var + eps) * gamma[c];
      loss += (y + (centred ? beta[c] : 0.0)) * w[r * C + c];
    }
  }
  return loss;
}

TEST(NormReference, BackwardMatchesFiniteDifferences) {
  for (const Normalization kind : kKinds) {
    for (int64_t C : {1, 2, 7, 16}) {
      const int64_t rows = 3;
      const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 200);
      const Vec& w = in.dy;  // dL/dy
      Outputs o(rows, C);
      o.zero_gradients();
      cpu::ref::norm_forward(kind, o.y.data(), o.mean.data(), o.rstd.data(), in.x.data(),
                             in.gamma.data(), in.beta.data(), rows, C, kEps);
      cpu::ref::norm_backward(kind, o.dx.data(), o.dgamma.data(), o.dbeta.data(), w.data(),
                              in.x.data(), in.gamma.data(), o.mean.data(), o.rstd.data(), rows, C);
      std::vector<double> x(in.x.begin(), in.x.end()), gamma(in.gamma.begin(), in.gamma.end()),
          beta(in.beta.begin(), in.beta.end());
      const bool centred = normalization_centred(kind);
      auto loss = [&] { return norm_loss(centred, x, gamma, beta, w, rows, C, kEps); };
      // The finite differences are good to ~1e-9; the reference's float outputs and its float
      // mean and rstd (as saved by forward) to a few 2^-24 relative.
      SCOPED_TRACE(testing::Message() << normalization_name(kind) << " C=" << C);
      const auto tol = [](float got) { return 1e-5 * (1 + std::fabs(got)); };
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(o.dx[i], test::central_difference(x, i, loss), tol(o.dx[i])) << i;
      for (size_t i = 0; i < gamma.size(); ++i) {
        EXPECT_NEAR(o.dgamma[i], test::central_difference(gamma, i, loss), tol(o.dgamma[i]));
        if (centred) {
          EXPECT_NEAR(o.dbeta[i], test::central_difference(beta, i, loss), tol(o.dbeta[i]));
        }
      }
    }
  }
}

TEST(NormFp8, FusedIsBitIdenticalToForwardThenQuantize) {
  for (const Normalization kind : kKinds) {
    for (int64_t C : kColumns) {
      const int64_t rows = 13;
      const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 300);
      Outputs o(rows, C);
      forward(kind, o, in, rows, C);
      for (DType f : {DType::E4M3, DType::E5M2}) {
        // 1: in range. fp8_max / 2: |y| > 2 saturates (y reaches about 4 here). 1e-3: many
        // small values flush in E4M3.
        for (float scale : {1.0f, fp8_max(f) / 2.0f, 1e-3f}) {
          std::vector<uint8_t> want(rows * C), got(rows * C, 0xaa);
          const CastStats w = quantize(want.data(), o.y.data(), rows * C, scale, f);
          Outputs o2(rows, C);
          const CastStats g = cpu::norm_forward_fp8(
              kind, got.data(), scale, f, nullptr, o2.mean.data(), o2.rstd.data(), in.x.data(),
              nullptr, in.gamma.data(), in.beta.data(), rows, C, kEps);
          SCOPED_TRACE(testing::Message() << normalization_name(kind) << " C=" << C << " "
                                          << dtype_short_name(f) << " scale=" << scale);
          EXPECT_EQ(got, want);
          EXPECT_TRUE(same_bits(o2.mean, o.mean));
          EXPECT_TRUE(same_bits(o2.rstd, o.rstd));
          test::expect_same_stats(g, w);
          if (scale == fp8_max(f) / 2.0f && C >= 64) {
            EXPECT_GT(g.saturated, 0);
          }
        }
      }
    }
  }
}

// The BF16 twin (a BF16 GEMM's input written as it is made): forward's output rounded, with
// and without the residual add in front.
TEST(NormBf16, FusedIsBitIdenticalToForwardThenRounded) {
  for (const Normalization kind : kKinds) {
    for (int64_t C : kColumns) {
      const int64_t rows = 13;
      const Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 400);
      const Vec r = random_normal(rows * C, static_cast<uint32_t>(C) + 401);
      for (const bool residual : {false, true}) {
        SCOPED_TRACE(testing::Message() << normalization_name(kind) << " C=" << C
                                        << (residual ? " with a residual" : ""));
        Outputs o(rows, C), o2(rows, C);
        Vec s(rows * C), s2(rows * C);
        cpu::norm_forward(kind, o.y.data(), s.data(), o.mean.data(), o.rstd.data(), in.x.data(),
                          residual ? r.data() : nullptr, in.gamma.data(), in.beta.data(), rows, C,
                          kEps);
        std::vector<bf16_t> want(rows * C), got(rows * C, 0xaaaa);
        for (int64_t i = 0; i < rows * C; ++i) want[i] = bf16_from_float(o.y[i]);
        cpu::norm_forward_bf16(kind, got.data(), s2.data(), o2.mean.data(), o2.rstd.data(),
                               in.x.data(), residual ? r.data() : nullptr, in.gamma.data(),
                               in.beta.data(), rows, C, kEps);
        EXPECT_EQ(got, want);
        EXPECT_TRUE(same_bits(o2.mean, o.mean));
        EXPECT_TRUE(same_bits(o2.rstd, o.rstd));
        if (residual) {
          EXPECT_TRUE(same_bits(s2, s));
        }
      }
    }
  }
}

// The residual add fused in front (--no-fusion adds, then runs the kernels above): the same
// sum and the same outputs bit for bit, FP32 and FP8.
TEST(AddNorm, FusedAddIsBitIdenticalToAddThenNorm) {
  for (const Normalization kind : kKinds) {
    for (int64_t C : kColumns) {
      const int64_t rows = 9;
      Inputs in = make_inputs(rows, C, static_cast<uint32_t>(C) + 500);
      const Vec x = in.x, r = random_normal(rows * C, static_cast<uint32_t>(C) + 501);
      for (int64_t i = 0; i < rows * C; ++i) in.x[i] = x[i] + r[i];
      Outputs o(rows, C), o2(rows, C);
      forward(kind, o, in, rows, C);
      Vec s2(rows * C);
      cpu::norm_forward(kind, o2.y.data(), s2.data(), o2.mean.data(), o2.rstd.data(), x.data(),
                        r.data(), in.gamma.data(), in.beta.data(), rows, C, kEps);
      SCOPED_TRACE(testing::Message() << normalization_name(kind) << " C=" << C);
      EXPECT_TRUE(same_bits(s2, in.x));
      EXPECT_TRUE(same_bits(o2.y, o.y));
      EXPECT_TRUE(same_bits(o2.mean, o.mean));
      EXPECT_TRUE(same_bits(o2.rstd, o.rstd));
      std::vector<uint8_t> want(rows * C), got(rows * C, 0xaa);
      const CastStats w = quantize(want.data(), o.y.data(), rows * C, 8.0f, DType::E4M3);
      Vec s3(rows * C);
      const CastStats g = cpu::norm_forward_fp8(kind, got.data(), 8.0f, DType::E4M3, s3.data(),
                                                o2.mean.data(), o2.rstd.data(), x.data(), r.data(),
                                                in.gamma.data(), in.beta.data(), rows, C, kEps);
      EXPECT_TRUE(same_bits(s3, in.x));
      EXPECT_EQ(got, want);
      test::expect_same_stats(g, w);
    }
  }
}

TEST(NormDeterminism, SameBitsForAnyThreadCount) {
  for (const Normalization kind : kKinds) {
    const int64_t rows = 67, C = 1023;  // big enough to run in parallel
    const Inputs in = make_inputs(rows, C, 400);
    struct Result {
      Outputs o;
      std::vector<uint8_t> codes;
      CastStats stats;
    };
    auto run = [&](int threads) {
      omp_set_num_threads(threads);
      Result r{Outputs(rows, C), std::vector<uint8_t>(rows * C), {}};
      forward(kind, r.o, in, rows, C);
      backward(kind, r.o, in, rows, C);
      r.stats = cpu::norm_forward_fp8(kind, r.codes.data(), 100.0f, DType::E4M3, nullptr,
                                      r.o.mean.data(), r.o.rstd.data(), in.x.data(), nullptr,
                                      in.gamma.data(), in.beta.data(), rows, C, kEps);
      return r;
    };
    const auto [a, b, c, d] = test::at_thread_counts(run);
    SCOPED_TRACE(normalization_name(kind));
    for (const Result* r : {&b, &c, &d}) {
      for (const auto field : {&Outputs::y, &Outputs::mean, &Outputs::rstd, &Outputs::dx,
                               &Outputs::dgamma, &Outputs::dbeta})
        EXPECT_TRUE(same_bits(r->o.*field, a.o.*field));
      EXPECT_EQ(r->codes, a.codes);
      test::expect_same_stats(r->stats, a.stats);
    }
  }
}

}  // namespace
}  // namespace fp8lm
