// CUDA bias + activation (every activation of FP8LM_ACTIVATIONS) in every output precision, their
// backward, the bias gradient and the element-wise adds, against the CPU kernels on the same
// inputs.
//
// The device kernels run each activation's functor (kernels/activation_ops.h), as the CPU's
// portable twins (cpu::scalar) do, so they are held to those twins' bits; ReLU, the bias and
// the adds are exact anyway. The kernels the CPU backend dispatches to may be the
// AVX-512 twins, which fuse multiply-adds; against those the bounds of the CPU's own
// Avx512AgreesWithScalar test apply (8 (1 + |u|) units of 2^-24), and an FP8 code may then
// differ by one step where the two FP32 values straddle a rounding midpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_compare.h"
#include "cuda_test_util.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/casts.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/types.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using test::DeviceFp8;
using test::expect_same_bf16;
using test::expect_same_codes;
using test::expect_same_floats;
using Vec = std::vector<float>;

struct Shape {
  int64_t rows, C;  // C: the activation's width (F for SwiGLU, whose input is 2F wide)
};
const Shape kShapes[] = {{1, 64}, {7, 100}, {64, 768}, {130, 2048}, {3, 4100}, {33, 7}};

enum class Out { F32, E4M3, E5M2, BF16 };
const Out kOuts[] = {Out::F32, Out::E4M3, Out::E5M2, Out::BF16};
// Every activation of FP8LM_ACTIVATIONS.
std::vector<Activation> all_activations() {
  std::vector<Activation> acts;
  for (std::string_view name : activation_names()) acts.push_back(parse_activation(name));
  return acts;
}
const std::vector<Activation> kActs = all_activations();

DType format_of(Out o) {
  return o == Out::E5M2 ? DType::E5M2 : DType::E4M3;
}
bool is_fp8(Out o) {
  return o == Out::E4M3 || o == Out::E5M2;
}
int64_t in_cols(Activation a, int64_t C) {
  return activation_input_width(a, C);
}
// Scales at which some outputs of N(0, 3) pre-activations saturate and some flush.
float scale_for(Out o) {
  return o == Out::E5M2 ? 8192.0f : 64.0f;
}

// N(0, 3) pre-activations [rows, cols] with specials at fixed places: NaN, ±Inf, ±0, values
// past exp's clamps, subnormals, GELU's gradient zero near -0.75, and -30 at the start of every
// other row (in SwiGLU's gate half: an output small enough to flush).
Vec make_h(int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t n = rows * cols;
  Vec h = test::random_normal(n, seed, 0.0f, 3.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            INFINITY,
                            -INFINITY,
                            0.0f,
                            -0.0f,
                            100.0f,
                            -100.0f,
                            1e30f,
                            -1e30f,
                            1e-40f,
                            -1e-40f,
                            -0.7518f};
  for (size_t k = 0; k < std::size(specials); ++k) {
    const size_t i = (k * 7919) % static_cast<size_t>(n);
    h[i] = specials[k];
  }
  for (int64_t r = 0; r < rows; r += 2) h[r * cols] = -30.0f;
  return h;
}

// The CPU's scalar twin of act on pre-activations h [rows, in_cols(C)] -> y [rows, C].
Vec twin_forward(Activation act, const Vec& h, int64_t rows, int64_t C) {
  Vec y(rows * C);
  cpu::scalar::act_forward(y.data(), h.data(), act, rows, C);
  return y;
}

Vec twin_backward(Activation act, const Vec& dy, const Vec& h, int64_t rows, int64_t C) {
  Vec dh(rows * in_cols(act, C));
  cpu::scalar::act_backward(dh.data(), dy.data(), h.data(), act, rows, C);
  return dh;
}

// What the CPU backend runs (dispatched, maybe AVX-512): h += bias, y = act(h).
Vec dispatched_forward(Activation act, Vec h, const Vec& bias, int64_t rows, int64_t C) {
  Vec y(rows * C);
  cpu::bias_act_forward(y.data(), h.data(), bias.data(), act, rows, C);
  return y;
}

CastStats dispatched_forward_fp8(std::vector<uint8_t>& codes, Activation act, Vec h,
                                 const Vec& bias, int64_t rows, int64_t C, float scale, DType f) {
  codes.resize(rows * C);
  return cpu::bias_act_forward_fp8(codes.data(), scale, f, h.data(), bias.data(), act, rows, C);
}

// |u| of GELU's tanh argument, which scales how far the AVX-512 twin may stray (see above).
double gelu_u(double x) {
  return std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
}

// got (the device, equal to the scalar twin) against the dispatched CPU kernel: within the
// CPU's own twin-agreement bound, specials identical. grow[i] is the relative bound of i.
void expect_near_dispatched(const Vec& got, const Vec& want,
                            const std::function<double(size_t)>& grow, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(got[i]) && std::isfinite(want[i])) {
      ASSERT_NEAR(got[i], want[i], grow(i) * std::fabs(want[i]) + 1e-30) << what << " at " << i;
    } else {
      ASSERT_TRUE(test::same_float(got[i], want[i]))
          << what << " at " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
}

// FP8 codes from FP32 values that may differ in their last bits: equal, or one code step apart
// on the same side of zero, and rarely (a midpoint must fall between the two values).
void expect_codes_near(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType f,
                       const char* what) {
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i] || (test::is_nan_code(got[i], f) && test::is_nan_code(want[i], f)))
      continue;
    ++differ;
    const int step = std::abs((got[i] & 0x7f) - (want[i] & 0x7f));
    ASSERT_TRUE((got[i] & 0x80) == (want[i] & 0x80) && step == 1)
        << what << " at " << i << ": got " << int{got[i]} << ", want " << int{want[i]};
  }
  EXPECT_LE(differ, 1 + got.size() / 1000) << what;
}

// The relative bound for element i of act's output: GELU's twins agree within 8 (1 + |u|)
// units (the CPU's Avx512AgreesWithScalar); SwiGLU's are each within 8 (1 + |a|) units of the
// reference (the CPU's GeluAndSwiGluMatchReferenceOverAWideRange), so within twice that.
std::function<double(size_t)> dispatch_bound(Activation act, const Vec& h_biased, int64_t C) {
  constexpr double kUlp = 0x1p-24;
  if (act == Activation::Relu) return [](size_t) { return 0.0; };
  if (act == Activation::Gelu) {
    return [&h_biased](size_t i) { return 8 * (1 + std::fabs(gelu_u(h_biased[i]))) * kUlp; };
  }
  return [&h_biased, C](size_t i) {
    const size_t r = i / static_cast<size_t>(C), j = i % static_cast<size_t>(C);
    const double a = h_biased[r * 2 * static_cast<size_t>(C) + j];
    return 16 * (1 + std::fabs(a)) * kUlp;
  };
}

void check_bias_act_forward(Activation act, Out out) {
  int64_t saturated = 0, flushed = 0;
  for (const Shape sh : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << activation_name(act) << " rows " << sh.rows << " C " << sh.C);
    const int64_t n = sh.rows * sh.C, hn = sh.rows * in_cols(act, sh.C);
    const Vec h = make_h(sh.rows, in_cols(act, sh.C), static_cast<uint32_t>(sh.rows * 131 + sh.C));
    const Vec bias = test::random_normal(in_cols(act, sh.C), 3);

    Vec h_biased = h;
    cpu::add_bias(h_biased.data(), bias.data(), sh.rows, in_cols(act, sh.C));
    const Vec y_twin = twin_forward(act, h_biased, sh.rows, sh.C);
    const float scale = scale_for(out);

    auto d_h = to_device(h), d_bias = to_device(bias);
    DeviceBuffer<float> y(out == Out::F32 ? n : 0);
    DeviceBuffer<bf16_t> y16(out == Out::BF16 ? n : 0);
    DeviceFp8 q(n, scale, format_of(out));
    ProducerOut o;
    if (out == Out::F32) o.y = y.data();
    if (out == Out::BF16) o.y16 = y16.data();
    if (is_fp8(out)) o.y8 = q.out();
    cuda::bias_act_forward(o, d_h.data(), d_bias.data(), act, sh.rows, sh.C, nullptr);

    expect_same_floats(to_host(d_h.data(), hn), h_biased, "h + bias");
    if (out == Out::F32) {
      const Vec got = to_host(y.data(), n);
      expect_same_floats(got, y_twin, "y vs scalar twin");
      expect_near_dispatched(got, dispatched_forward(act, h, bias, sh.rows, sh.C),
                             dispatch_bound(act, h_biased, sh.C), "y vs dispatched");
    }
    if (out == Out::BF16) {
      std::vector<bf16_t> want(n);
      cpu::fp32_to_bf16(want.data(), y_twin.data(), n);
      expect_same_bf16(to_host(y16.data(), n), want, "y16");
    }
    if (is_fp8(out)) {
      const DType f = format_of(out);
      std::vector<uint8_t> want(n), near_want;
      const CastStats want_stats = quantize(Isa::Scalar, want.data(), y_twin.data(), n, scale, f);
      const auto got = q.host_codes(n);
      const CastStats got_stats = q.stats();
      expect_same_codes(got, want, f, "codes vs scalar twin");
      test::expect_same_stats(got_stats, want_stats);
      saturated += want_stats.saturated;
      flushed += want_stats.flushed;

      const CastStats near_stats =
          dispatched_forward_fp8(near_want, act, h, bias, sh.rows, sh.C, scale, f);
      expect_codes_near(got, near_want, f, "codes vs dispatched");
      if (got_stats.amax != near_stats.amax) {  // equal when both are Inf
        EXPECT_NEAR(got_stats.amax, near_stats.amax, 1e-6 * near_stats.amax);
      }
      // A count moves only where a code moved, which expect_codes_near keeps rare.
      EXPECT_LE(std::abs(got_stats.saturated - near_stats.saturated), 1 + n / 1000);
      EXPECT_LE(std::abs(got_stats.flushed - near_stats.flushed), 1 + n / 1000);
    }
  }
  if (is_fp8(out)) {
    EXPECT_GT(saturated, 0) << "the scale should make some outputs saturate";
    // ReLU passes its inputs through, none of them small enough.
    if (act != Activation::Relu) {
      EXPECT_GT(flushed, 0) << "the scale should make some outputs flush";
    }
  }
}

TEST(CudaActivations, BiasActForwardFp32MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Activation a : kActs) check_bias_act_forward(a, Out::F32);
}

TEST(CudaActivations, BiasActForwardE4M3MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Activation a : kActs) check_bias_act_forward(a, Out::E4M3);
}

TEST(CudaActivations, BiasActForwardE5M2MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Activation a : kActs) check_bias_act_forward(a, Out::E5M2);
}

TEST(CudaActivations, BiasActForwardBf16MatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Activation a : kActs) check_bias_act_forward(a, Out::BF16);
}

// Without a bias, h is left as it is and act applies to it directly.
TEST(CudaActivations, ForwardWithoutBiasLeavesHAlone) {
  FP8LM_REQUIRE_CUDA();
  const Shape sh{5, 300};
  for (const Activation act : kActs) {
    SCOPED_TRACE(activation_name(act));
    const int64_t n = sh.rows * sh.C, hn = sh.rows * in_cols(act, sh.C);
    const Vec h = make_h(sh.rows, in_cols(act, sh.C), 17);
    auto d_h = to_device(h);
    DeviceBuffer<float> y(n);
    ProducerOut o;
    o.y = y.data();
    cuda::bias_act_forward(o, d_h.data(), nullptr, act, sh.rows, sh.C, nullptr);
    expect_same_floats(to_host(d_h.data(), hn), h, "h");
    expect_same_floats(to_host(y.data(), n), twin_forward(act, h, sh.rows, sh.C), "y");
  }
}

// dh = act'(h) * dy, overwritten (the device buffer starts as garbage).
TEST(CudaActivations, ActBackwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Activation act : kActs) {
    for (const Shape sh : kShapes) {
      SCOPED_TRACE(::testing::Message()
                   << activation_name(act) << " rows " << sh.rows << " C " << sh.C);
      const int64_t n = sh.rows * sh.C, hn = sh.rows * in_cols(act, sh.C);
      const Vec h = make_h(sh.rows, in_cols(act, sh.C), static_cast<uint32_t>(sh.rows * 17 + sh.C));
      const Vec dy = test::random_normal(n, 4);
      auto d_h = to_device(h), d_dy = to_device(dy);
      auto d_dh = to_device(test::random_normal(hn, 5));
      cuda::act_backward(d_dh.data(), d_dy.data(), d_h.data(), act, sh.rows, sh.C, nullptr);
      const Vec got = to_host(d_dh.data(), hn);
      expect_same_floats(got, twin_backward(act, dy, h, sh.rows, sh.C), "dh vs scalar twin");

      Vec want(hn);
      cpu::act_backward(want.data(), dy.data(), h.data(), act, sh.rows, sh.C);
      // Bounds relative to the scale of the terms (|dy|, and |b| for SwiGLU's da), not to the
      // result, which passes through zero (GELU's gradient at -0.75, da at a = -1.28).
      constexpr double kUlp = 0x1p-24;
      for (int64_t i = 0; i < hn; ++i) {
        double tol = 0.0;
        if (act == Activation::Gelu)
          tol = 8 * (1 + std::fabs(gelu_u(h[i]))) * kUlp * std::fabs(dy[i]);
        if (act == Activation::Swiglu) {
          const int64_t r = i / (2 * sh.C), j = i % (2 * sh.C) % sh.C;
          const double a = h[r * 2 * sh.C + j], b = h[r * 2 * sh.C + sh.C + j];
          // Twice the CPU's reference bounds: 8 (1 + |a|)^2 units of |dy b| for da,
          // 8 (1 + |a|) of |dy a| for db.
          tol = 16 * (1 + std::fabs(a)) * (1 + std::fabs(a)) * kUlp * std::fabs(dy[r * sh.C + j]) *
                (std::fabs(b) + std::fabs(a));
        }
        if (std::isfinite(got[i]) && std::isfinite(want[i])) {
          ASSERT_NEAR(got[i], want[i], tol + 1e-30) << "dh vs dispatched at " << i;
        } else {
          ASSERT_TRUE(test::same_float(got[i], want[i])) << "dh vs dispatched at " << i;
        }
      }
    }
  }
}

// ReLU's gradient is 0 at 0 (either sign) and for NaN; dy passes only where h > 0.
TEST(CudaActivations, ReluGradientAtZero) {
  FP8LM_REQUIRE_CUDA();
  const Vec h = {0.0f, -0.0f, 1e-45f, -1e-45f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  const Vec dy = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  auto d_h = to_device(h), d_dy = to_device(dy);
  DeviceBuffer<float> dh(h.size());
  cuda::act_backward(dh.data(), d_dy.data(), d_h.data(), Activation::Relu, 1, 6, nullptr);
  expect_same_floats(to_host(dh.data(), h.size()), Vec{0.0f, 0.0f, 3.0f, 0.0f, 0.0f, 6.0f}, "dh");
}

// dbias += column sums of dy, in chunks of 64 rows: the CPU's bits up to 64 rows, within float
// rounding beyond (each side within (rows - 1) units of 2^-24 of sum |dy|, plus the final add).
TEST(CudaActivations, BiasBackwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape sh : kShapes) {
    SCOPED_TRACE(::testing::Message() << "rows " << sh.rows << " C " << sh.C);
    const Vec dy = test::random_normal(sh.rows * sh.C, 9);
    const Vec prior = test::random_normal(sh.C, 10);
    Vec want = prior;
    cpu::bias_backward(want.data(), dy.data(), sh.rows, sh.C);
    auto d_dy = to_device(dy);
    const auto run = [&] {
      auto dbias = to_device(prior);
      cuda::bias_backward(dbias.data(), d_dy.data(), sh.rows, sh.C, nullptr);
      return to_host(dbias.data(), sh.C);
    };
    const Vec got = run();
    expect_same_floats(run(), got, "second run");
    if (sh.rows <= 64) {
      expect_same_floats(got, want, "dbias");
      continue;
    }
    for (int64_t c = 0; c < sh.C; ++c) {
      double abs_sum = std::fabs(prior[c]) + std::fabs(want[c]);
      for (int64_t r = 0; r < sh.rows; ++r) abs_sum += std::fabs(dy[r * sh.C + c]);
      const double tol = 2.0 * static_cast<double>(sh.rows + 1) * 0x1p-24 * abs_sum;
      ASSERT_NEAR(got[c], want[c], tol) << "dbias at column " << c;
    }
  }
}

TEST(CudaActivations, AddBiasMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape sh : kShapes) {
    const Vec y0 = test::random_normal(sh.rows * sh.C, 11), bias = test::random_normal(sh.C, 12);
    Vec want = y0;
    cpu::add_bias(want.data(), bias.data(), sh.rows, sh.C);
    auto y = to_device(y0), b = to_device(bias);
    cuda::add_bias(y.data(), b.data(), sh.rows, sh.C, nullptr);
    expect_same_floats(to_host(y.data(), y0.size()), want, "y + bias");
  }
}

// add and accumulate are one rounding each: exact against the host's float add, aliased or not.
TEST(CudaActivations, AddAndAccumulateAreExact) {
  FP8LM_REQUIRE_CUDA();
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3 * 4100 + 5}, int64_t{3000000}}) {
    SCOPED_TRACE(n);
    const Vec a = test::random_normal(n, 13), b = test::random_normal(n, 14, 0.0f, 1e-3f);
    Vec sum(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
    auto da = to_device(a), db = to_device(b);
    DeviceBuffer<float> y(n);
    cuda::add(y.data(), da.data(), db.data(), n, nullptr);
    expect_same_floats(to_host(y.data(), n), sum, "add");
    cuda::add(da.data(), da.data(), db.data(), n, nullptr);  // y aliases a
    expect_same_floats(to_host(da.data(), n), sum, "add in place");
    auto acc = to_device(a);
    cuda::accumulate(acc.data(), db.data(), n, nullptr);
    expect_same_floats(to_host(acc.data(), n), sum, "accumulate");
  }
}

}  // namespace
}  // namespace fp8lm
