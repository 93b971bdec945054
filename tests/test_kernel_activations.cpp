// The bias and every activation of FP8LM_ACTIVATIONS: the fast kernels against the
// double-precision reference (GELU, ReLU and SwiGLU with bounds derived for each; every
// activation, GeGLU included, on every backend in test_backend_ops), the reference backwards
// against finite differences, the fused producers (FP8 and FP32) against the unfused sequence
// bit for bit, and the same bits for any thread count. The portable twins and the AVX-512
// rows are also tested directly, against the reference and each other.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <numbers>
#include <random>
#include <string_view>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/activation_ops.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/activations_isa.h"
#include "kernels/cpu/casts.h"
#include "kernels/types.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;
using test::random_normal;
using test::same_bits;
using Codes = std::vector<uint8_t>;

const int64_t kColumns[] = {1, 7, 64, 1023, 4096};
// Row lengths, the last longer than any model's.
const int64_t kLengths[] = {1, 7, 1023, 4096, 100003};

constexpr double kUlp = 0x1p-24;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

double gelu_u(double x) {
  return kSqrt2OverPi * (x + 0.044715 * x * x * x);
}

TEST(AddBias, MatchesReferenceExactly) {
  for (int64_t C : kColumns) {
    const int64_t rows = 17;
    const Vec bias = random_normal(C, 1);
    Vec y = random_normal(rows * C, 2), y_ref = y;
    cpu::add_bias(y.data(), bias.data(), rows, C);
    cpu::ref::add_bias(y_ref.data(), bias.data(), rows, C);
    // One float addition, correctly rounded either way (a double sum of two floats rounds to
    // the same float).
    EXPECT_TRUE(same_bits(y, y_ref)) << C;
  }
}

TEST(BiasBackward, AccumulatesColumnSumsLikeReference) {
  for (int64_t C : kColumns) {
    const int64_t rows = 33;
    const Vec dy = random_normal(rows * C, 3);
    Vec dbias = random_normal(C, 4), dbias_ref = dbias;  // non-zero: both must add to it
    cpu::bias_backward(dbias.data(), dy.data(), rows, C);
    cpu::ref::bias_backward(dbias_ref.data(), dy.data(), rows, C);
    // A float sum of rows terms (any order) plus the prior value is within (rows + 1) *
    // 2^-24 * sum|terms| of the exact sum.
    for (int64_t c = 0; c < C; ++c) {
      double abs_sum = std::fabs(dbias_ref[c]);
      for (int64_t r = 0; r < rows; ++r) abs_sum += std::fabs(dy[r * C + c]);
      ASSERT_NEAR(dbias[c], dbias_ref[c], static_cast<double>(rows + 1) * kUlp * abs_sum)
          << "C=" << C << " c=" << c;
    }
  }
}

// dy's BF16 copy made in the bias gradient's pass (a BF16 GEMM's operand): fp32_to_bf16's bits,
// specials and ties included, and the same sums as without it, across several threads' shares
// and past one AVX-512 call's columns.
TEST(BiasBackward, Bf16CopyOfDyIsFp32ToBf16InTheSamePass) {
  for (const int64_t C : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1023}, int64_t{9000}}) {
    const int64_t rows = 37, n = rows * C;
    Vec dy = random_normal(n, 23);
    const float specials[] = {std::nanf(""),
                              INFINITY,
                              -INFINITY,
                              0x1p-130f,
                              -0x1p-140f,
                              std::bit_cast<float>(0x3f808000u),
                              std::bit_cast<float>(0x3f818000u)};
    for (int64_t i = 0; i < n; i += 5) dy[i] = specials[(i / 5) % 7];
    Vec want_sums = random_normal(C, 24), got_sums = want_sums;
    std::vector<bf16_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), 0x1234);
    cpu::bias_backward(want_sums.data(), dy.data(), rows, C);
    cpu::fp32_to_bf16(want.data(), dy.data(), n);
    cpu::bias_backward(got_sums.data(), dy.data(), rows, C, got.data());
    EXPECT_TRUE(same_bits(got_sums, want_sums)) << "C=" << C;
    EXPECT_EQ(got, want) << "C=" << C;
  }
}

// The AVX-512 column sums keep the portable loop's order (each column from zero, rows in order,
// then into dbias), so the bias gradient's bits do not depend on the CPU: a sum of values
// spread over six orders of magnitude rounds differently in any other order.
TEST(BiasBackward, Avx512ColumnSumsMatchThePortableLoopBitForBit) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (const int64_t rows : {1, 15, 16, 17, 33, 300}) {
    for (const int64_t width : {1, 15, 16, 17, 63, 64, 65, 100, 255, 256, 257, 1000, 4096}) {
      const int64_t stride = width + 5;
      Vec dy = random_normal(rows * stride, 21);
      for (int64_t i = 0; i < rows * stride; ++i)
        dy[i] *= std::ldexp(1.0f, static_cast<int>(i % 20) - 10);
      const Vec prior = random_normal(width, 22);
      Vec want = prior, got = prior;
      for (int64_t j = 0; j < width; ++j) {
        float acc = 0.0f;
        for (int64_t r = 0; r < rows; ++r) acc += dy[r * stride + j];
        want[j] += acc;
      }
      cpu::avx512::column_sums(got.data(), dy.data(), rows, stride, width);
      EXPECT_TRUE(same_bits(got, want)) << "rows " << rows << " width " << width;
      // With the BF16 copy: the same sums, and each live value rounded at its place only.
      std::vector<bf16_t> copy(static_cast<size_t>(rows * stride), 0x1234), want_copy = copy;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j)
          want_copy[r * stride + j] = bf16_from_float(dy[r * stride + j]);
      Vec with_copy = prior;
      cpu::avx512::column_sums(with_copy.data(), dy.data(), rows, stride, width, copy.data());
      EXPECT_TRUE(same_bits(with_copy, want)) << "rows " << rows << " width " << width;
      EXPECT_EQ(copy, want_copy) << "rows " << rows << " width " << width;
    }
  }
}

TEST(BiasReference, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, C = 7;
  const Vec w = random_normal(rows * C, 5), y0 = random_normal(rows * C, 6);
  std::vector<double> bias(C, 0.25);
  auto loss = [&] {  // L = sum((y0 + bias) * w)
    double l = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < C; ++c) l += (y0[r * C + c] + bias[c]) * w[r * C + c];
    return l;
  };
  Vec dbias(C, 0.0f);
  cpu::ref::bias_backward(dbias.data(), w.data(), rows, C);
  for (size_t c = 0; c < bias.size(); ++c)
    EXPECT_NEAR(dbias[c], test::central_difference(bias, c, loss),
                1e-6 * (1 + std::fabs(dbias[c])));
}

// Every activation of the list, in its order.
std::vector<Activation> all_activations() {
  std::vector<Activation> acts;
  for (std::string_view name : activation_names()) acts.push_back(parse_activation(name));
  return acts;
}

// The kernels on a flat n values (one row of n): h += nothing, y = act(h).
Vec forward(Activation act, const Vec& x, int64_t F) {
  Vec h = x, y(static_cast<size_t>(F));
  cpu::bias_act_forward(y.data(), h.data(), nullptr, act, 1, F);
  return y;
}

// GELU: the fast kernel evaluates 0.5 (1 + tanh u) as 1 / (1 + exp(-2u)); a rounding error of
// u (a few units of 2^-24 relative) moves that by about |u| times as much, so the tolerance
// is 8 (1 + |u|) units relative. The reference (tanh form in double) itself cancels in
// 1 + tanh u for x < -6, an absolute error below 1e-15 that the floor covers.
TEST(GeluForward, MatchesReference) {
  for (int64_t n : kLengths) {
    const Vec x = random_normal(n, static_cast<uint32_t>(n), 0.0f, 3.0f);
    const Vec y = forward(Activation::Gelu, x, n);
    Vec y_ref(n);
    cpu::ref::act_forward(y_ref.data(), x.data(), Activation::Gelu, 1, n);
    for (int64_t i = 0; i < n; ++i) {
      const double tol = 8 * (1 + std::fabs(gelu_u(x[i]))) * kUlp * std::fabs(y_ref[i]) + 1e-15;
      ASSERT_NEAR(y[i], y_ref[i], tol) << "n=" << n << " x=" << x[i];
    }
  }
}

TEST(GeluBackward, MatchesReferenceAndOverwritesDx) {
  for (int64_t n : kLengths) {
    const Vec x = random_normal(n, static_cast<uint32_t>(n), 0.0f, 3.0f);
    const Vec dy = random_normal(n, static_cast<uint32_t>(n) + 1);
    Vec dx(n, NAN), dx_ref(n);  // NaN: a kernel that added to dx would keep it
    cpu::act_backward(dx.data(), dy.data(), x.data(), Activation::Gelu, 1, n);
    cpu::ref::act_backward(dx_ref.data(), dy.data(), x.data(), Activation::Gelu, 1, n);
    // gelu' is at most about 1.13 in size and its terms no larger, so errors are absolute
    // relative to |dy|, with the same (1 + |u|) growth as forward.
    for (int64_t i = 0; i < n; ++i) {
      const double tol = 8 * (1 + std::fabs(gelu_u(x[i]))) * kUlp * std::fabs(dy[i]);
      ASSERT_NEAR(dx[i], dx_ref[i], tol) << "n=" << n << " x=" << x[i];
    }
  }
}

TEST(Relu, MatchesReferenceExactly) {
  for (int64_t n : kLengths) {
    Vec x = random_normal(n, static_cast<uint32_t>(n));
    x[0] = NAN;  // passes through forward, zero gradient
    const Vec dy = random_normal(n, static_cast<uint32_t>(n) + 1);
    Vec y_ref(n), dx(n, NAN), dx_ref(n);
    const Vec y = forward(Activation::Relu, x, n);
    cpu::ref::act_forward(y_ref.data(), x.data(), Activation::Relu, 1, n);
    cpu::act_backward(dx.data(), dy.data(), x.data(), Activation::Relu, 1, n);
    cpu::ref::act_backward(dx_ref.data(), dy.data(), x.data(), Activation::Relu, 1, n);
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(dx[0], 0.0f);
    // No arithmetic at all: selections only.
    EXPECT_TRUE(same_bits(y, y_ref)) << n;
    EXPECT_TRUE(same_bits(dx, dx_ref)) << n;
  }
}

// SwiGLU: sigmoid's exp carries the relative error of a into s by up to |a| times, hence the
// (1 + |a|) factors; da is a difference of terms of size |g b s| (1 + |a|), so it is held to
// an absolute bound against that size. Measured: under 4 units of each bound.
TEST(SwiGlu, MatchesReference) {
  for (int64_t F : kColumns) {
    const int64_t rows = 5;
    const Vec x = random_normal(rows * 2 * F, static_cast<uint32_t>(F), 0.0f, 3.0f);
    const Vec dy = random_normal(rows * F, static_cast<uint32_t>(F) + 1);
    Vec y(rows * F), y_ref(rows * F), dx(rows * 2 * F, NAN), dx_ref(rows * 2 * F), h = x;
    cpu::bias_act_forward(y.data(), h.data(), nullptr, Activation::Swiglu, rows, F);
    cpu::ref::act_forward(y_ref.data(), x.data(), Activation::Swiglu, rows, F);
    cpu::act_backward(dx.data(), dy.data(), x.data(), Activation::Swiglu, rows, F);
    cpu::ref::act_backward(dx_ref.data(), dy.data(), x.data(), Activation::Swiglu, rows, F);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < F; ++j) {
        const double a = x[r * 2 * F + j], b = x[r * 2 * F + F + j], g = dy[r * F + j];
        const double grow = 8 * (1 + std::fabs(a)) * kUlp, s = 1 / (1 + std::exp(-a));
        const int64_t ia = r * 2 * F + j, ib = ia + F;
        ASSERT_NEAR(y[r * F + j], y_ref[r * F + j], grow * std::fabs(y_ref[r * F + j]) + 1e-30)
            << "F=" << F << " a=" << a;
        ASSERT_NEAR(dx[ia], dx_ref[ia], grow * (1 + std::fabs(a)) * std::fabs(g * b * s) + 1e-30)
            << "F=" << F << " a=" << a;
        ASSERT_NEAR(dx[ib], dx_ref[ib], grow * std::fabs(dx_ref[ib]) + 1e-30)
            << "F=" << F << " a=" << a;
      }
    }
  }
}

// The reference's backward (what every fast kernel is held to) against central differences
// of its own forward in double, for every activation: a gated one's gate and value both.
// Inputs stay 0.01 away from 0, where ReLU's kink would meet the difference's step.
TEST(ActivationReference, BackwardMatchesFiniteDifferences) {
  for (const Activation act : all_activations()) {
    SCOPED_TRACE(activation_name(act));
    const int64_t rows = 3, F = 9, in = activation_input_width(act, F);
    const bool gated = in != F;
    const Vec w = random_normal(rows * F, 11);
    Vec xf = random_normal(rows * in, 12, 0.0f, 3.0f);
    for (auto& v : xf) v = v < 0 ? v - 0.01f : v + 0.01f;
    std::vector<double> x(xf.begin(), xf.end());
    auto loss = [&] {
      double l = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < F; ++j) {
          const double gate = x[r * in + j], value = gated ? x[r * in + F + j] : 1.0;
          l += cpu::ref::act_value(act, gate, value) * w[r * F + j];
        }
      }
      return l;
    };
    Vec dx(rows * in);
    cpu::ref::act_backward(dx.data(), w.data(), xf.data(), act, rows, F);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(dx[i], test::central_difference(x, i, loss), 1e-6 * (1 + std::fabs(dx[i]))) << i;
  }
}

// dh may alias dy for an ungated activation (activations.h).
TEST(ActivationBackward, UngatedWorksInPlace) {
  const int64_t n = 1031;
  const Vec x = random_normal(n, 13, 0.0f, 3.0f), dy = random_normal(n, 14);
  for (const Activation act : all_activations()) {
    if (activation_gated(act)) continue;
    SCOPED_TRACE(activation_name(act));
    Vec dx(n), inplace = dy;
    cpu::act_backward(dx.data(), dy.data(), x.data(), act, 1, n);
    cpu::act_backward(inplace.data(), inplace.data(), x.data(), act, 1, n);
    EXPECT_TRUE(same_bits(dx, inplace));
  }
}

// The saved pre-activation read in BF16 (nn/saved_activation.h): each row widened as it is
// read gives the bits of widening the whole of h first, every activation, gated or not, at
// sizes on either side of the threads' threshold.
TEST(ActivationBackward, Bf16InputGivesTheBitsOfWideningItFirst) {
  for (const Activation act : all_activations()) {
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{37}}) {
      for (int64_t C : kColumns) {
        SCOPED_TRACE(fmt::format("{} rows={} C={}", activation_name(act), rows, C));
        const int64_t n = rows * activation_input_width(act, C);
        const Vec h = random_normal(n, static_cast<uint32_t>(C + rows), 0.0f, 3.0f);
        const Vec dy = random_normal(rows * C, static_cast<uint32_t>(C + rows) + 1);
        std::vector<bf16_t> h16(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) h16[i] = bf16_from_float(h[i]);
        Vec widened(n), want(n), got(n, -1.0f);
        cpu::bf16_to_f32(widened.data(), h16.data(), n);
        cpu::act_backward(want.data(), dy.data(), widened.data(), act, rows, C);
        cpu::act_backward(got.data(), dy.data(), h16.data(), act, rows, C);
        EXPECT_TRUE(same_bits(got, want));
      }
    }
  }
}

// The row bodies of each instruction set this CPU runs for GELU and SwiGLU: the portable twin
// (the functors of kernels/activation_ops.h) and, where the CPU has it, AVX-512. The kernels
// above reach only the one the CPU dispatches to; these tests hold every twin to the reference.
struct Rows {
  const char* name;
  void (*gelu)(float*, const float*, int64_t);
  void (*gelu_backward)(float*, const float*, const float*, int64_t);
  void (*swiglu)(float*, const float*, const float*, int64_t);
  void (*swiglu_backward)(float*, float*, const float*, const float*, const float*, int64_t);
  void (*sigmoid)(float*, const float*, int64_t);
};

// cpu::scalar's rows (the functors of kernels/activation_ops.h, which the CUDA kernels run),
// behind the rows' signatures: a gated row's halves are one [gate | value] row there.
namespace portable {
void gelu(float* y, const float* x, int64_t n) {
  cpu::scalar::act_forward(y, x, Activation::Gelu, 1, n);
}
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  cpu::scalar::act_backward(dx, dy, x, Activation::Gelu, 1, n);
}
Vec joined(const float* a, const float* b, int64_t n) {
  Vec h(a, a + n);
  h.insert(h.end(), b, b + n);
  return h;
}
void swiglu(float* y, const float* a, const float* b, int64_t n) {
  cpu::scalar::act_forward(y, joined(a, b, n).data(), Activation::Swiglu, 1, n);
}
void swiglu_backward(float* da, float* db, const float* g, const float* a, const float* b,
                     int64_t n) {
  Vec dh(static_cast<size_t>(2 * n));
  cpu::scalar::act_backward(dh.data(), g, joined(a, b, n).data(), Activation::Swiglu, 1, n);
  std::copy(dh.begin(), dh.begin() + n, da);
  std::copy(dh.begin() + n, dh.end(), db);
}
void sigmoid(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = act::sigmoid(x[i]);
}
}  // namespace portable

std::vector<Rows> runnable_rows() {
  std::vector<Rows> rows = {{"portable", portable::gelu, portable::gelu_backward, portable::swiglu,
                             portable::swiglu_backward, portable::sigmoid}};
  if (cpu_features().avx512) {
    rows.push_back({"avx512", cpu::avx512::gelu_row, cpu::avx512::gelu_backward_row,
                    cpu::avx512::swiglu_row, cpu::avx512::swiglu_backward_row,
                    cpu::avx512::sigmoid_row});
  }
  return rows;
}

// Normal(0, 3) values, a sweep through the range where the gates move, and values past where
// exp over- or underflows.
Vec wide_inputs() {
  Vec x = random_normal(20011, 21, 0.0f, 3.0f);
  for (int i = -3000; i <= 3000; ++i) x.push_back(static_cast<float>(i) / 128.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 88.0f, -88.0f, 89.5f, -89.5f,
                  104.5f, -104.5f, 1e4f, -1e4f, 1e30f, -1e30f})
    x.push_back(v);
  return x;
}

// A float sweep over every binade from 2^-30 to 2^7, both signs: exp's whole clamped range
// and the subnormal and saturated tails of the sigmoid. Every result is checked against
// double: within 3 ulps where it is a normal float (exp, 1 + exp and the division each round
// once; measured at most 2.4), and for x below about -88.7, where exp(-x) overflows although
// the true sigmoid is still a subnormal (below 2^-127.5), 0 within that absolute bound.
TEST(ActivationRows, SigmoidIsAccurateOverTheWholeRange) {
  Vec x;
  for (uint32_t b = std::bit_cast<uint32_t>(0x1p-30f); b < std::bit_cast<uint32_t>(0x1p7f);
       b += 1021) {
    x.push_back(std::bit_cast<float>(b));
    x.push_back(-std::bit_cast<float>(b));
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (const Rows& rows : runnable_rows()) {
    SCOPED_TRACE(rows.name);
    Vec y(n);
    rows.sigmoid(y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
      const double tol = want >= FLT_MIN ? 3 * std::ldexp(1.0, std::ilogb(want) - 23) : 0x1p-127;
      ASSERT_NEAR(y[i], want, tol) << "x=" << x[i];
    }
    const Vec limits = {-INFINITY, -1e30f, -200.0f, -0.0f, 0.0f, 200.0f, 1e30f, INFINITY, NAN};
    Vec s(limits.size());
    rows.sigmoid(s.data(), limits.data(), static_cast<int64_t>(limits.size()));
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_EQ(s[1], 0.0f);
    EXPECT_EQ(s[2], 0.0f);
    EXPECT_EQ(s[3], 0.5f);
    EXPECT_EQ(s[4], 0.5f);
    EXPECT_EQ(s[5], 1.0f);
    EXPECT_EQ(s[6], 1.0f);
    EXPECT_EQ(s[7], 1.0f);
    EXPECT_TRUE(std::isnan(s[8]));
  }
}

// The same bounds as GeluForward / GeluBackward / SwiGlu above, over wide_inputs. The
// reference here is GELU's sigmoid form in double, which does not cancel for negative x as
// the tanh form does. Where exp overflows (x below about -10 for GELU, -88.7 for SwiGLU) the
// true outputs are below 1e-37 and come out 0, which the absolute floors cover.
TEST(ActivationRows, GeluAndSwiGluMatchReferenceOverAWideRange) {
  const Vec x = wide_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  const Vec dy = random_normal(n, 22), b = random_normal(n, 23, 0.0f, 3.0f);
  for (const Rows& rows : runnable_rows()) {
    SCOPED_TRACE(rows.name);
    Vec y(n), dx(n), ys(n), da(n), db(n);
    rows.gelu(y.data(), x.data(), n);
    rows.gelu_backward(dx.data(), dy.data(), x.data(), n);
    rows.swiglu(ys.data(), x.data(), b.data(), n);
    rows.swiglu_backward(da.data(), db.data(), dy.data(), x.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], u = gelu_u(v), grow = 8 * (1 + std::fabs(u)) * kUlp;
      if (std::fabs(v) < 1e3) {  // beyond, u (and the reference) overflows in the cube
        const double gate = 1 / (1 + std::exp(-2 * u));
        const double dgelu =
            gate + 2 * v * gate * (1 - gate) * kSqrt2OverPi * (1 + 3 * 0.044715 * v * v);
        ASSERT_NEAR(y[i], v * gate, grow * std::fabs(v * gate) + 1e-30) << v;
        ASSERT_NEAR(dx[i], dy[i] * dgelu, grow * std::fabs(dy[i]) + 1e-30) << v;
      }
      const double s = 1 / (1 + std::exp(-v)), g = dy[i], bv = b[i];
      const double sgrow = 8 * (1 + std::fabs(v)) * kUlp;
      ASSERT_NEAR(ys[i], v * s * bv, sgrow * std::fabs(v * s * bv) + 1e-30) << v;
      ASSERT_NEAR(da[i], g * bv * s * (1 + v * (1 - s)),
                  sgrow * (1 + std::fabs(v)) * std::fabs(g * bv * s) + 1e-30)
          << v;
      ASSERT_NEAR(db[i], g * v * s, sgrow * std::fabs(g * v * s) + 1e-30) << v;
    }
  }
}

// The twins round differently (AVX-512 fuses its multiply-adds), most visibly where |u| is
// large and t = -2u carries its rounding into exp: each is within 5 (1 + |u|) units of the
// reference there (measured), so within 8 (1 + |u|) of each other.
TEST(ActivationRows, Avx512AgreesWithScalar) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  const Vec x = wide_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  const Vec dy = random_normal(n, 24);
  Vec y0(n), y1(n), dx0(n), dx1(n), s0(n), s1(n);
  portable::gelu(y0.data(), x.data(), n);
  cpu::avx512::gelu_row(y1.data(), x.data(), n);
  portable::gelu_backward(dx0.data(), dy.data(), x.data(), n);
  cpu::avx512::gelu_backward_row(dx1.data(), dy.data(), x.data(), n);
  portable::sigmoid(s0.data(), x.data(), n);
  cpu::avx512::sigmoid_row(s1.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double grow = 8 * (1 + std::fabs(gelu_u(x[i]))) * kUlp;
    if (std::isfinite(y0[i]) || std::isfinite(y1[i])) {
      ASSERT_NEAR(y1[i], y0[i], grow * std::fabs(y0[i]) + 1e-30) << x[i];
    } else {
      ASSERT_TRUE(same_bits(Vec{y1[i]}, Vec{y0[i]}) || (std::isnan(y1[i]) && std::isnan(y0[i])))
          << x[i];
    }
    if (std::isfinite(dx0[i]) || std::isfinite(dx1[i])) {
      ASSERT_NEAR(dx1[i], dx0[i], grow * std::fabs(dy[i]) + 1e-30) << x[i];
    }
    ASSERT_NEAR(s1[i], s0[i], 6 * kUlp * std::fabs(s0[i]) + 0x1p-127) << x[i];
  }
}

// A value's result must not depend on where it sits in a row (the fused producers see rows,
// the flat kernels chunks), so a row's outputs equal those of one-element calls.
TEST(ActivationRows, ResultsDoNotDependOnPositionInTheRow) {
  const int64_t n = 37;  // two full AVX-512 vectors and a partial one
  const Vec x = random_normal(n, 25, 0.0f, 3.0f), b = random_normal(n, 26),
            g = random_normal(n, 27);
  for (const Rows& rows : runnable_rows()) {
    SCOPED_TRACE(rows.name);
    Vec y(n), dx(n), ys(n), da(n), db(n), s(n);
    rows.gelu(y.data(), x.data(), n);
    rows.gelu_backward(dx.data(), g.data(), x.data(), n);
    rows.swiglu(ys.data(), x.data(), b.data(), n);
    rows.swiglu_backward(da.data(), db.data(), g.data(), x.data(), b.data(), n);
    rows.sigmoid(s.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      Vec one(6);
      rows.gelu(&one[0], &x[i], 1);
      rows.gelu_backward(&one[1], &g[i], &x[i], 1);
      rows.swiglu(&one[2], &x[i], &b[i], 1);
      rows.swiglu_backward(&one[3], &one[4], &g[i], &x[i], &b[i], 1);
      rows.sigmoid(&one[5], &x[i], 1);
      EXPECT_TRUE(same_bits(one, Vec{y[i], dx[i], ys[i], da[i], db[i], s[i]})) << i;
    }
  }
}

// The unfused sequence the fused kernels must reproduce: add_bias on h, then the activation
// into y.
void unfused(Activation act, Vec& y, Vec& h, const Vec& bias, int64_t rows, int64_t F) {
  cpu::add_bias(h.data(), bias.data(), rows, activation_input_width(act, F));
  cpu::bias_act_forward(y.data(), h.data(), nullptr, act, rows, F);
}

TEST(BiasActivationFused, Fp8IsBitIdenticalToUnfusedThenQuantize) {
  for (const Activation act : all_activations()) {
    for (int64_t C : kColumns) {
      const int64_t rows = 9, in_cols = activation_input_width(act, C);
      const Vec h0 = random_normal(rows * in_cols, static_cast<uint32_t>(C), 0.0f, 2.0f);
      const Vec bias = random_normal(in_cols, static_cast<uint32_t>(C) + 1);
      Vec y(rows * C), h = h0;
      unfused(act, y, h, bias, rows, C);
      for (DType f : {DType::E4M3, DType::E5M2}) {
        // 1: in range. fp8_max / 2: outputs above 2 saturate (they reach about 8 here).
        // 1e-3: small outputs flush.
        for (float scale : {1.0f, fp8_max(f) / 2.0f, 1e-3f}) {
          SCOPED_TRACE(testing::Message() << activation_name(act) << " C=" << C << " "
                                          << dtype_short_name(f) << " scale=" << scale);
          Codes want(rows * C), got(rows * C, 0xaa);
          const CastStats w = quantize(want.data(), y.data(), rows * C, scale, f);
          Vec hf = h0;
          const CastStats g =
              cpu::bias_act_forward_fp8(got.data(), scale, f, hf.data(), bias.data(), act, rows, C);
          EXPECT_EQ(got, want);
          EXPECT_TRUE(same_bits(hf, h));  // h + bias kept for backward
          test::expect_same_stats(g, w);
          if (scale == fp8_max(f) / 2.0f && C >= 64) {
            EXPECT_GT(g.saturated, 0);
          }
        }
      }
    }
  }
}

// The BF16 twin (a BF16 GEMM's input written as it is made): the unfused output rounded.
TEST(BiasActivationFused, Bf16IsBitIdenticalToUnfusedThenRounded) {
  for (const Activation act : all_activations()) {
    for (int64_t C : kColumns) {
      const int64_t rows = 9, in_cols = activation_input_width(act, C);
      const Vec h0 = random_normal(rows * in_cols, static_cast<uint32_t>(C) + 4, 0.0f, 2.0f);
      const Vec bias = random_normal(in_cols, static_cast<uint32_t>(C) + 5);
      Vec y(rows * C), h = h0, hf = h0;
      unfused(act, y, h, bias, rows, C);
      std::vector<bf16_t> want(rows * C), got(rows * C, 0xaaaa);
      for (int64_t i = 0; i < rows * C; ++i) want[i] = bf16_from_float(y[i]);
      cpu::bias_act_forward_bf16(got.data(), hf.data(), bias.data(), act, rows, C);
      EXPECT_EQ(got, want) << activation_name(act) << " C=" << C;
      EXPECT_TRUE(same_bits(hf, h)) << activation_name(act) << " C=" << C;
    }
  }
}

TEST(BiasActivationFused, Fp32IsBitIdenticalToUnfused) {
  for (const Activation act : all_activations()) {
    for (int64_t C : kColumns) {
      const int64_t rows = 9, in_cols = activation_input_width(act, C);
      const Vec h0 = random_normal(rows * in_cols, static_cast<uint32_t>(C) + 2, 0.0f, 2.0f);
      const Vec bias = random_normal(in_cols, static_cast<uint32_t>(C) + 3);
      Vec y(rows * C), h = h0, yf(rows * C), hf = h0;
      unfused(act, y, h, bias, rows, C);
      cpu::bias_act_forward(yf.data(), hf.data(), bias.data(), act, rows, C);
      EXPECT_TRUE(same_bits(yf, y)) << activation_name(act) << " C=" << C;
      EXPECT_TRUE(same_bits(hf, h)) << activation_name(act) << " C=" << C;
    }
  }
}

TEST(ActivationDeterminism, SameBitsForAnyThreadCount) {
  const int64_t rows = 67, C = 1023;  // big enough to run in parallel
  const Vec h0 = random_normal(rows * 2 * C, 15, 0.0f, 2.0f), bias = random_normal(2 * C, 16);
  const Vec dy = random_normal(rows * 2 * C, 17);
  const std::vector<Activation> acts = all_activations();
  struct Result {
    Vec dbias;
    std::vector<Vec> dx;
    std::vector<Codes> codes;
    std::vector<CastStats> stats;
  };
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Result r{Vec(2 * C, 0.5f), {}, {}, {}};
    cpu::bias_backward(r.dbias.data(), dy.data(), rows, 2 * C);
    for (const Activation act : acts) {
      r.dx.emplace_back(rows * activation_input_width(act, C));
      cpu::act_backward(r.dx.back().data(), dy.data(), h0.data(), act, rows, C);
      Vec h = h0;
      r.codes.emplace_back(rows * C);
      r.stats.push_back(cpu::bias_act_forward_fp8(r.codes.back().data(), 300.0f, DType::E4M3,
                                                  h.data(), bias.data(), act, rows, C));
    }
    return r;
  };
  const auto [a, b, c, d] = test::at_thread_counts(run);
  for (const Result* o : {&b, &c, &d}) {
    EXPECT_TRUE(same_bits(o->dbias, a.dbias));
    for (size_t k = 0; k < acts.size(); ++k) {
      SCOPED_TRACE(activation_name(acts[k]));
      EXPECT_TRUE(same_bits(o->dx[k], a.dx[k]));
      EXPECT_EQ(o->codes[k], a.codes[k]);
      EXPECT_EQ(o->stats[k].amax, a.stats[k].amax);
      EXPECT_EQ(o->stats[k].saturated, a.stats[k].saturated);
      EXPECT_EQ(o->stats[k].flushed, a.stats[k].flushed);
    }
  }
}

}  // namespace
}  // namespace fp8lm
