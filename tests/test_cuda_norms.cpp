// The CUDA normalizations (LayerNorm and RMSNorm) against the CPU kernels on the same inputs,
// forward in every output precision (FP32, FP8 E4M3 / E5M2 with statistics, BF16), with and without
// the fused residual add, and backward.
//
// The device kernels sum each row in the CPU's order (16 lanes, kernels/cpu/row_reduce.h) and
// do every operation as a separate round-to-nearest step, as the CPU build does
// (-ffp-contract=off). So there is no tolerance in the forward pass or in dx: mean, rstd,
// y, s, the FP8 codes and statistics and the BF16 rounding must equal the CPU's bits.
// dgamma/dbeta are column sums over rows taken in chunks of 64 rows: bit-equal to the CPU up to
// 64 rows, and within float rounding beyond (see expect_column_sums_close).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_compare.h"
#include "cuda_test_util.h"
#include "kernels/cpu/casts.h"
#include "kernels/cpu/norms.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/norms.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using test::DeviceFp8;
using test::expect_same_bf16;
using test::expect_same_codes;
using test::expect_same_floats;
using Vec = std::vector<float>;

struct Shape {
  int64_t rows, C;
};
// One row, rows not a multiple of the 16 rows a block takes, C below, at and above the 16
// lanes, not a multiple of 4, and past 8192.
const Shape kShapes[] = {{1, 64},   {7, 100}, {64, 768}, {130, 2048},
                         {3, 4100}, {17, 1},  {33, 7},   {2, 12289}};
constexpr float kEps = 1e-5f;

using Norm = Normalization;
const Norm kNorms[] = {Norm::LayerNorm, Norm::RMSNorm};
enum class Out { F32, E4M3, E5M2, BF16 };

DType format_of(Out o) {
  return o == Out::E5M2 ? DType::E5M2 : DType::E4M3;
}
bool is_fp8(Out o) {
  return o == Out::E4M3 || o == Out::E5M2;
}

struct Inputs {
  Vec x, r, gamma, beta;
};

// x has a non-zero mean, so LayerNorm's variance is not RMSNorm's mean square.
Inputs make_inputs(Shape s, uint32_t seed) {
  return {test::random_normal(s.rows * s.C, seed, 1.0f, 2.0f),
          test::random_normal(s.rows * s.C, seed + 1, 0.0f, 1.0f),
          test::random_normal(s.C, seed + 2, 1.0f, 0.5f),
          test::random_normal(s.C, seed + 3, 0.0f, 0.5f)};
}

// What a forward pass leaves: one of y / codes / y16, and s (residual only), mean (LayerNorm
// only), rstd, stats (FP8 only).
struct Result {
  Vec y, s, mean, rstd;
  std::vector<uint8_t> codes;
  std::vector<bf16_t> y16;
  CastStats stats;
};

Result run_cpu(Norm norm, Out out, const Inputs& in, Shape sh, bool residual, float scale) {
  const int64_t n = sh.rows * sh.C;
  Result res;
  res.s.resize(residual ? n : 0);
  res.mean.resize(norm == Norm::LayerNorm ? sh.rows : 0);
  res.rstd.resize(sh.rows);
  float* s = res.s.data();
  float* mean = res.mean.data();
  float* rstd = res.rstd.data();
  const float *x = in.x.data(), *r = in.r.data(), *g = in.gamma.data(), *b = in.beta.data();
  if (is_fp8(out)) {
    const DType f = format_of(out);
    res.codes.resize(n);
    uint8_t* q = res.codes.data();
    res.stats = cpu::norm_forward_fp8(norm, q, scale, f, residual ? s : nullptr, mean, rstd, x,
                                      residual ? r : nullptr, g, b, sh.rows, sh.C, kEps);
    return res;
  }
  Vec y(n);
  cpu::norm_forward(norm, y.data(), residual ? s : nullptr, mean, rstd, x, residual ? r : nullptr,
                    g, b, sh.rows, sh.C, kEps);
  if (out == Out::BF16) {
    res.y16.resize(n);
    cpu::fp32_to_bf16(res.y16.data(), y.data(), n);
  } else {
    res.y = std::move(y);
  }
  return res;
}

Result run_cuda(Norm norm, Out out, const Inputs& in, Shape sh, bool residual, float scale) {
  const auto n = static_cast<size_t>(sh.rows * sh.C);
  const auto rows = static_cast<size_t>(sh.rows);
  auto x = to_device(in.x), r = to_device(in.r), g = to_device(in.gamma), b = to_device(in.beta);
  DeviceBuffer<float> y(out == Out::F32 ? n : 0), s(residual ? n : 0), mean(rows), rstd(rows);
  DeviceBuffer<bf16_t> y16(out == Out::BF16 ? n : 0);
  DeviceFp8 q(n, scale, format_of(out));
  ProducerOut o;
  if (out == Out::F32) o.y = y.data();
  if (out == Out::BF16) o.y16 = y16.data();
  if (is_fp8(out)) o.y8 = q.out();
  float* s_ptr = residual ? s.data() : nullptr;
  const float* r_ptr = residual ? r.data() : nullptr;
  cuda::norm_forward(norm, o, s_ptr, mean.data(), rstd.data(), x.data(), r_ptr, g.data(), b.data(),
                     sh.rows, sh.C, kEps, nullptr);
  Result res;
  if (out == Out::F32) res.y = to_host(y.data(), n);
  if (out == Out::BF16) res.y16 = to_host(y16.data(), n);
  if (is_fp8(out)) {
    res.codes = q.host_codes(n);
    res.stats = q.stats();
  }
  if (residual) res.s = to_host(s.data(), n);
  if (norm == Norm::LayerNorm) res.mean = to_host(mean.data(), rows);
  res.rstd = to_host(rstd.data(), rows);
  return res;
}

// FP8 scales that make some outputs saturate (|y| above about 2.8) and some flush (|y| below
// 2^-4 for E4M3, 2^-5 for E5M2), so the counters are exercised, and 1.
std::vector<float> scales_for(Out out) {
  if (out == Out::E4M3) return {1.0f, 160.0f, 0x1p-6f};
  if (out == Out::E5M2) return {1.0f, 2e4f, 0x1p-12f};
  return {1.0f};
}

// Every shape, with and without the residual, every scale: all outputs bit-equal.
void check_forward(Norm norm, Out out) {
  SCOPED_TRACE(normalization_name(norm));
  int64_t saturated = 0, flushed = 0;
  for (const Shape sh : kShapes) {
    for (const bool residual : {false, true}) {
      for (const float scale : scales_for(out)) {
        SCOPED_TRACE(::testing::Message() << "rows " << sh.rows << " C " << sh.C << " residual "
                                          << residual << " scale " << scale);
        const Inputs in = make_inputs(sh, static_cast<uint32_t>(sh.rows * 7919 + sh.C));
        const Result want = run_cpu(norm, out, in, sh, residual, scale);
        const Result got = run_cuda(norm, out, in, sh, residual, scale);
        expect_same_floats(got.y, want.y, "y");
        expect_same_floats(got.s, want.s, "s");
        expect_same_floats(got.mean, want.mean, "mean");
        expect_same_floats(got.rstd, want.rstd, "rstd");
        expect_same_bf16(got.y16, want.y16, "y16");
        if (is_fp8(out)) {
          expect_same_codes(got.codes, want.codes, format_of(out), "codes");
          test::expect_same_stats(got.stats, want.stats);
          saturated += want.stats.saturated;
          flushed += want.stats.flushed;
        }
      }
    }
  }
  if (is_fp8(out)) {
    EXPECT_GT(saturated, 0) << "the scales should make some outputs saturate";
    EXPECT_GT(flushed, 0) << "the scales should make some outputs flush";
  }
}

TEST(CudaNorms, ForwardFp32MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Norm norm : kNorms) check_forward(norm, Out::F32);
}

TEST(CudaNorms, ForwardE4M3MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Norm norm : kNorms) check_forward(norm, Out::E4M3);
}

TEST(CudaNorms, ForwardE5M2MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Norm norm : kNorms) check_forward(norm, Out::E5M2);
}

TEST(CudaNorms, ForwardBf16MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Norm norm : kNorms) check_forward(norm, Out::BF16);
}

// The FP8 statistics add to what is there: amax is a running max, the counters are sums.
TEST(CudaNorms, Fp8StatisticsAccumulate) {
  FP8LM_REQUIRE_CUDA();
  const Shape sh{9, 300};
  const Inputs in = make_inputs(sh, 11);
  const Result want = run_cpu(Norm::LayerNorm, Out::E4M3, in, sh, false, 160.0f);
  ASSERT_GT(want.stats.saturated, 0);
  const auto n = static_cast<size_t>(sh.rows * sh.C);
  auto x = to_device(in.x), g = to_device(in.gamma), b = to_device(in.beta);
  DeviceBuffer<float> mean(sh.rows), rstd(sh.rows);
  for (const float amax0 : {0.5f, 1e4f}) {
    const unsigned long long counts0 = 1000;
    DeviceFp8 q(n, 160.0f, DType::E4M3, amax0, counts0);
    ProducerOut o;
    o.y8 = q.out();
    cuda::norm_forward(Norm::LayerNorm, o, nullptr, mean.data(), rstd.data(), x.data(), nullptr,
                       g.data(), b.data(), sh.rows, sh.C, kEps, nullptr);
    const CastStats got = q.stats(counts0);
    EXPECT_EQ(got.amax, std::max(amax0, want.stats.amax));
    EXPECT_EQ(got.saturated, want.stats.saturated);
    EXPECT_EQ(got.flushed, want.stats.flushed);
  }
  // Without amax and counters the codes are still written.
  DeviceFp8 q(n, 160.0f, DType::E4M3);
  ProducerOut o;
  o.y8 = q.out();
  o.y8.amax = nullptr;
  o.y8.saturated = nullptr;
  o.y8.flushed = nullptr;
  cuda::norm_forward(Norm::LayerNorm, o, nullptr, mean.data(), rstd.data(), x.data(), nullptr,
                     g.data(), b.data(), sh.rows, sh.C, kEps, nullptr);
  expect_same_codes(q.host_codes(n), want.codes, DType::E4M3, "codes");
}

TEST(CudaNorms, RejectsAnythingButOneOutput) {
  FP8LM_REQUIRE_CUDA();
  DeviceBuffer<float> buf(64), stat(1);
  DeviceBuffer<bf16_t> buf16(64);
  DeviceBuffer<uint8_t> codes(64);
  const auto forward = [&](const ProducerOut& o) {
    cuda::norm_forward(Norm::LayerNorm, o, nullptr, stat.data(), stat.data(), buf.data(), nullptr,
                       buf.data(), buf.data(), 1, 64, kEps, nullptr);
  };
  ProducerOut none;
  EXPECT_THROW(forward(none), Error);
  ProducerOut two;
  two.y = buf.data();
  two.y16 = buf16.data();
  EXPECT_THROW(forward(two), Error);
  ProducerOut no_scale;
  no_scale.y8.data = codes.data();
  EXPECT_THROW(forward(no_scale), Error);
}

struct Grads {
  Vec dx, dgamma, dbeta;
};

// An upper bound on |got - want| for a column sum that both sides take in float, in different
// orders: each side is within (rows - 1) units of 2^-24 of sum |term|, plus one unit of the
// final add to the prior gradient; twice that for the two sides together.
void expect_column_sums_close(const Vec& got, const Vec& want, const Vec& prior,
                              const std::vector<double>& abs_sum, int64_t rows, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < got.size(); ++c) {
    const double tol = 2.0 * static_cast<double>(rows + 1) * 0x1p-24 *
                       (abs_sum[c] + std::fabs(prior[c]) + std::fabs(want[c]));
    ASSERT_NEAR(got[c], want[c], tol) << what << " at column " << c;
  }
}

void check_backward(Norm norm) {
  SCOPED_TRACE(normalization_name(norm));
  for (const Shape sh : kShapes) {
    SCOPED_TRACE(::testing::Message() << "rows " << sh.rows << " C " << sh.C);
    const int64_t n = sh.rows * sh.C;
    const Inputs in = make_inputs(sh, static_cast<uint32_t>(sh.rows * 31 + sh.C));
    const Vec dy = test::random_normal(n, 5);
    // Non-zero starting gradients: the kernels add to them.
    const Grads prior{test::random_normal(n, 6), test::random_normal(sh.C, 7),
                      test::random_normal(sh.C, 8)};
    Vec mean(sh.rows), rstd(sh.rows), y(n);
    cpu::norm_forward(norm, y.data(), nullptr, mean.data(), rstd.data(), in.x.data(), nullptr,
                      in.gamma.data(), in.beta.data(), sh.rows, sh.C, kEps);
    Grads want = prior;
    cpu::norm_backward(norm, want.dx.data(), want.dgamma.data(), want.dbeta.data(), dy.data(),
                       in.x.data(), in.gamma.data(), mean.data(), rstd.data(), sh.rows, sh.C);

    auto d_dy = to_device(dy), d_x = to_device(in.x), d_g = to_device(in.gamma);
    auto d_mean = to_device(mean), d_rstd = to_device(rstd);
    const auto run = [&] {
      auto dx = to_device(prior.dx), dgamma = to_device(prior.dgamma),
           dbeta = to_device(prior.dbeta);
      cuda::norm_backward(norm, dx.data(), dgamma.data(), dbeta.data(), d_dy.data(), d_x.data(),
                          d_g.data(), d_mean.data(), d_rstd.data(), sh.rows, sh.C, nullptr);
      return Grads{to_host(dx.data(), n), to_host(dgamma.data(), sh.C),
                   to_host(dbeta.data(), sh.C)};
    };
    const Grads got = run();
    expect_same_floats(got.dx, want.dx, "dx");

    // The deterministic column sums: the same bits on a second run.
    const Grads again = run();
    expect_same_floats(again.dgamma, got.dgamma, "dgamma, second run");
    expect_same_floats(again.dbeta, got.dbeta, "dbeta, second run");

    if (sh.rows <= 64) {  // one chunk: the CPU's order
      expect_same_floats(got.dgamma, want.dgamma, "dgamma");
      if (norm == Norm::LayerNorm) expect_same_floats(got.dbeta, want.dbeta, "dbeta");
    } else {
      std::vector<double> abs_g(sh.C, 0.0), abs_b(sh.C, 0.0);
      for (int64_t r = 0; r < sh.rows; ++r) {
        for (int64_t c = 0; c < sh.C; ++c) {
          const int64_t i = r * sh.C + c;
          const float xhat =
              norm == Norm::LayerNorm ? (in.x[i] - mean[r]) * rstd[r] : in.x[i] * rstd[r];
          abs_g[c] += std::fabs(static_cast<double>(dy[i]) * xhat);
          abs_b[c] += std::fabs(dy[i]);
        }
      }
      expect_column_sums_close(got.dgamma, want.dgamma, prior.dgamma, abs_g, sh.rows, "dgamma");
      if (norm == Norm::LayerNorm) {
        expect_column_sums_close(got.dbeta, want.dbeta, prior.dbeta, abs_b, sh.rows, "dbeta");
      }
    }
    if (norm == Norm::RMSNorm) expect_same_floats(got.dbeta, prior.dbeta, "dbeta untouched");
  }
}

TEST(CudaNorms, BackwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Norm norm : kNorms) check_backward(norm);
}

}  // namespace
}  // namespace fp8lm
