// One table of op cases, run on every backend this build has and this process can use
// (kernels/backend.h), each against the plain reference (as ggml's test-backend-ops checks
// every backend): the GEMM, the norms and activations into every output dtype, attention,
// the embedding and the loss. The operands travel through the backend's own memory
// (BackendBuffer), so a case runs the same code whatever the device. A backend that lacks a
// case (FP8 tensor cores before compute capability 8.9) says so in supports_gemm.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bf16.h"
#include "fp8/quantize.h"
#include "fp8lm/error.h"
#include "kernels/backend_buffer.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/rope.h"
#include "kernels/loss.h"
#include "kernels/types.h"
#include "test_util.h"
#ifdef FP8LM_WITH_CUDA
#include "cuda_test_util.h"
#endif

namespace fp8lm {
namespace {

using Vec = std::vector<float>;

struct GemmCase {
  Trans ta, tb;
  int64_t M, N, K;
  DType a, b;
  float alpha, beta;
  std::string name() const {
    return std::string(ta == Trans::T ? "T" : "N") + (tb == Trans::T ? "T" : "N") + " " +
           std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
           std::string(dtype_name(a)) + "x" + std::string(dtype_name(b)) +
           " beta=" + std::to_string(beta);
  }
};

constexpr Trans N = Trans::N, T = Trans::T;
const GemmCase kGemmCases[] = {
    {N, N, 7, 5, 3, DType::F32, DType::F32, 1.0f, 0.0f},
    {T, N, 33, 17, 65, DType::F32, DType::F32, 0.5f, 1.0f},
    {N, T, 64, 48, 32, DType::F32, DType::F32, 1.0f, 0.0f},
    {T, T, 9, 31, 17, DType::F32, DType::F32, 2.0f, 0.5f},
    {N, T, 33, 17, 65, DType::BF16, DType::BF16, 1.0f, 0.0f},
    {T, N, 16, 32, 48, DType::BF16, DType::BF16, 1.0f, 1.0f},
    // The FP8 GEMMs of a Linear: forward (E4M3 x E4M3), dgrad and wgrad (E5M2 dy x E4M3) as TN,
    // and the NN and TN layouts and odd sizes the modules call (the CUDA backend transposes
    // and pads those for cuBLASLt).
    {N, T, 32, 48, 64, DType::E4M3, DType::E4M3, 1.0f, 0.0f},
    {N, T, 32, 48, 64, DType::E5M2, DType::E4M3, 1.0f, 1.0f},
    {N, T, 16, 16, 128, DType::E4M3, DType::E5M2, 1.0f, 0.0f},
    {N, N, 17, 9, 33, DType::E5M2, DType::E4M3, 1.0f, 1.0f},
    {T, N, 9, 17, 33, DType::E5M2, DType::E4M3, 1.0f, 1.0f},
};

// One operand as its dtype stores it, and the exact values it stands for.
struct Operand {
  std::vector<uint8_t> bytes;
  Vec values;       // decoded, times scale_inv: what the product multiplies
  float scale_inv;  // FP8; 1 otherwise
};

Operand make_operand(DType t, int64_t n, uint32_t seed, float fp8_scale) {
  const Vec x = test::random_normal(n, seed);
  Operand o{{}, Vec(static_cast<size_t>(n)), 1.0f};
  if (t == DType::F32) {
    o.values = x;
    o.bytes.resize(x.size() * 4);
    std::memcpy(o.bytes.data(), x.data(), o.bytes.size());
  } else if (t == DType::BF16) {
    std::vector<bf16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      h[i] = bf16_from_float(x[i]);
      o.values[i] = bf16_to_float(h[i]);
    }
    o.bytes.resize(h.size() * 2);
    std::memcpy(o.bytes.data(), h.data(), o.bytes.size());
  } else {
    o.bytes.resize(x.size());
    quantize(o.bytes.data(), x.data(), n, fp8_scale, t);
    o.scale_inv = 1.0f / fp8_scale;
    for (size_t i = 0; i < x.size(); ++i) o.values[i] = fp8_decode(o.bytes[i], t) * o.scale_inv;
  }
  return o;
}

struct GemmInputs {
  Operand a, b;
  Vec c0;
};

template <typename T>
using Buf = BackendBuffer<T>;

// A backend under test: which GEMM cases it takes, the rounding unit of its accumulator per
// operand dtype (the tolerance is (K + 4) units of the products' magnitude: one rounding per
// addition, plus alpha, beta and the scale_invs), and the relative rounding of attention's
// probabilities and score gradients inside its kernels (0: FP32).
struct BackendUnderTest {
  Backend& be;
  std::function<bool(const GemmCase&)> supports_gemm;
  std::function<double(DType)> accumulation_unit;
  double attention_rounding = 0;
};

// The backends present, the CPU first; one line for each that is not.
std::vector<BackendUnderTest> present_backends() {
  std::vector<BackendUnderTest> v;
  // Every product is exact in FP32 and summed in FP32.
  v.push_back(
      {cpu_backend(), [](const GemmCase&) { return true; }, [](DType) { return 0x1p-24; }, 0.0});
#ifdef FP8LM_WITH_CUDA
  if (!test::cuda_device_present()) {
    std::printf("backend cuda: no device here, skipped\n");
    return v;
  }
  v.push_back({cuda::backend(0),
               [](const GemmCase& c) {
                 if (c.a == DType::BF16) return test::cuda_cc() >= 80;
                 // Any FP8 layout and size: the backend transposes and pads for cuBLASLt.
                 return !is_fp8(c.a) || test::cuda_cc() >= 89;
               },
               // FP32: no TF32. BF16 tensor cores sum in FP32 but in their own tree order (2
               // units allowed). FP8 tensor cores keep about 14 bits in the accumulator
               // (DeepSeek-V3 report, 3.3.2) between cuBLASLt's promotions to FP32.
               [](DType t) { return is_fp8(t)          ? 0x1p-13
                                    : t == DType::BF16 ? 0x1p-23
                                                       : 0x1p-24; },
               // Q, K, V and P are BF16 inside (kernels/cuda/attention.h).
               0x1p-8});
#else
  std::printf("backend cuda: not built, skipped\n");
#endif
  return v;
}

TEST(BackendOps, GemmAgreesWithTheReferenceOnEveryBackend) {
  int ran = 0;
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    for (const GemmCase& c : kGemmCases) {
      if (!bt.supports_gemm(c)) continue;
      SCOPED_TRACE(be.name() + " " + c.name());
      const GemmInputs in{make_operand(c.a, c.M * c.K, 1, 16.0f),
                          make_operand(c.b, c.K * c.N, 2, 8.0f), test::random_normal(c.M * c.N, 3)};
      Vec want = in.c0;
      cpu::ref::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, in.a.values.data(), in.b.values.data(),
                     c.beta, want.data());
      const Buf<uint8_t> a(be, in.a.bytes), b(be, in.b.bytes);
      const Buf<float> sa(be, Vec{in.a.scale_inv}), sb(be, Vec{in.b.scale_inv});
      Buf<float> C(be, in.c0);
      be.gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, {a.data(), c.a, sa.data()},
              {b.data(), c.b, sb.data()}, c.beta, C.data());
      const Vec got = C.to_host();
      const Vec mag = test::gemm_magnitudes(c.ta, c.tb, c.M, c.N, c.K, c.alpha, in.a.values,
                                            in.b.values, c.beta, in.c0, nullptr);
      const double unit = (static_cast<double>(c.K) + 4) * bt.accumulation_unit(c.a);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], unit * mag[i] + 1e-30) << "at " << i;
      ++ran;
    }
  }
  EXPECT_GE(ran, static_cast<int>(std::size(kGemmCases)));  // the CPU runs every case
}

// A Linear's forward, gemm_bias, gives the bits of gemm then add_bias on every backend: with
// alpha 1 (F32, BF16) and with an output scale (FP8's scale_invs; a BF16 operand with a block-
// scaled cast's tensor scale), where the CPU adds the bias in the pass that applies the scale;
// over enough rows that the pass splits over threads.
TEST(BackendOps, GemmBiasGivesTheBitsOfGemmThenAddBias) {
  struct Case {
    DType t;
    bool tensor_scale;  // BF16: scale_invs as a block-scaled operand carries them
    int64_t M, N, K;
  };
  const Case cases[] = {{DType::F32, false, 7, 5, 3},
                        {DType::BF16, false, 33, 17, 65},
                        {DType::BF16, true, 300, 260, 48},
                        {DType::BF16, true, 9, 31, 17},
                        {DType::E4M3, false, 300, 260, 64}};
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    for (const Case& c : cases) {
      const GemmCase g{N, T, c.M, c.N, c.K, c.t, c.t, 1.0f, 0.0f};
      if (!bt.supports_gemm(g)) continue;
      SCOPED_TRACE(be.name() + " " + g.name() + (c.tensor_scale ? " scaled" : ""));
      const Operand a = make_operand(c.t, c.M * c.K, 4, 16.0f);
      const Operand b = make_operand(c.t, c.N * c.K, 5, 8.0f);
      const Buf<uint8_t> da(be, a.bytes), db(be, b.bytes);
      const Buf<float> sa(be, Vec{c.tensor_scale ? 0.3f : a.scale_inv}),
          sb(be, Vec{c.tensor_scale ? 1.7f : b.scale_inv}), bias(be, test::random_normal(c.N, 6));
      const bool scales = is_fp8(c.t) || c.tensor_scale;
      const GemmOperand A{da.data(), c.t, scales ? sa.data() : nullptr},
          B{db.data(), c.t, scales ? sb.data() : nullptr};
      Buf<float> want(be, Vec(static_cast<size_t>(c.M * c.N))), got(be, want.to_host());
      be.gemm(N, T, c.M, c.N, c.K, 0.5f, A, B, 0.0f, want.data());
      be.add_bias(want.data(), bias.data(), c.M, c.N);
      be.gemm_bias(N, T, c.M, c.N, c.K, 0.5f, A, B, bias.data(), got.data());
      const Vec w = want.to_host(), h = got.to_host();
      ASSERT_EQ(h.size(), w.size());
      for (size_t i = 0; i < h.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(h[i]), std::bit_cast<uint32_t>(w[i])) << "at " << i;
    }
  }
}

// LayerNorm and RMSNorm into each output dtype, with and without the residual add fused in.
struct NormCase {
  Normalization kind;
  int64_t rows, C;
  DType out;
  bool residual;
  std::string name() const {
    return std::string(normalization_name(kind)) + " " + std::to_string(rows) + "x" +
           std::to_string(C) + " -> " + std::string(dtype_name(out)) + (residual ? " (x + r)" : "");
  }
};

const NormCase kNormCases[] = {
    {Normalization::LayerNorm, 7, 33, DType::F32, false},
    {Normalization::LayerNorm, 16, 256, DType::E4M3, true},
    {Normalization::LayerNorm, 5, 96, DType::BF16, false},
    {Normalization::RMSNorm, 7, 33, DType::F32, true},
    {Normalization::RMSNorm, 16, 256, DType::E5M2, false},
    {Normalization::RMSNorm, 5, 96, DType::BF16, true},
};

struct NormInputs {
  Vec x, r, gamma, beta;
};

constexpr float kNormEps = 1e-5f;
// Normalized rows and activations of N(0, 1) inputs stay far below 448 / 4: no FP8 output
// saturates.
constexpr float kFp8Scale = 4.0f;

// A producer's output in a backend's memory, in the case's dtype, with an FP8 output's scale,
// amax and counters; read back as values (FP8 codes decoded and unscaled, BF16 widened).
class Produced {
 public:
  Produced(Backend& be, DType t, int64_t n)
      : t_(t),
        n_(n),
        y_(be, static_cast<size_t>(n) * dtype_size(t)),
        scale_(be, Vec{kFp8Scale}),
        amax_(be, Vec{0.0f}),
        counts_(be, std::vector<unsigned long long>{0, 0}) {}
  ProducerOut out() {
    if (t_ == DType::F32) return ProducerOut::fp32(reinterpret_cast<float*>(y_.data()));
    if (t_ == DType::BF16) return ProducerOut::bf16(reinterpret_cast<bf16_t*>(y_.data()));
    return ProducerOut::fp8(
        {y_.data(), scale_.data(), amax_.data(), t_, counts_.data(), counts_.data() + 1});
  }
  Vec values() const {
    const std::vector<uint8_t> bytes = y_.to_host();
    Vec y(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) {
      if (t_ == DType::F32) {
        std::memcpy(&y[i], bytes.data() + i * 4, 4);
      } else if (t_ == DType::BF16) {
        bf16_t h;
        std::memcpy(&h, bytes.data() + i * 2, 2);
        y[i] = bf16_to_float(h);
      } else {
        y[i] = fp8_decode(bytes[i], t_) / kFp8Scale;
      }
    }
    return y;
  }
  float amax() const { return amax_.to_host()[0]; }
  unsigned long long saturated() const { return counts_.to_host()[0]; }

  // The rounding of this dtype at a value of magnitude |w|: half its ulp, 2^-(mantissa bits +
  // 1) of |w| in the normal range (2^-8 for BF16, 2^-4 for E4M3, 2^-3 for E5M2), and at most
  // a subnormal step below it.
  double rounding(double w) const {
    const double half_ulp = t_ == DType::F32    ? 0.0
                            : t_ == DType::BF16 ? 0x1p-8
                            : t_ == DType::E4M3 ? 0x1p-4
                                                : 0x1p-3;
    const double floor = is_fp8(t_) ? fp8_min_subnormal(t_) / kFp8Scale : 0;
    return half_ulp * std::fabs(w) + floor;
  }

  // y within tol(w) + this dtype's rounding of the reference everywhere; an FP8 output's amax
  // the reference's within amax_tol, nothing saturated.
  template <class Tol>
  void expect_near(const Vec& want, Tol tol, double amax_tol) const {
    const Vec got = values();
    double ref_amax = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double w = want[i];
      ASSERT_NEAR(got[i], w, tol(w) + rounding(w)) << "at " << i;
      ref_amax = std::max(ref_amax, std::fabs(w));
    }
    if (is_fp8(t_)) {
      EXPECT_NEAR(amax(), ref_amax, amax_tol * (1 + ref_amax));
      EXPECT_EQ(saturated(), 0u);
    }
  }

 private:
  DType t_;
  int64_t n_;
  Buf<uint8_t> y_;
  Buf<float> scale_, amax_;
  Buf<unsigned long long> counts_;
};

// The bias gradient with dy's BF16 copy made beside it (a BF16 Linear's backward): on every
// backend the bits of its bias_backward and its fp32_to_bf16 made apart.
TEST(BackendOps, BiasGradientWithBf16CopyIsTheTwoOpsApart) {
  const int64_t rows = 45, C = 300;
  const Vec dy = test::random_normal(rows * C, 31), prior = test::random_normal(C, 32);
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    SCOPED_TRACE(be.name());
    const Buf<float> d_dy(be, dy);
    Buf<float> want_sums(be, prior), got_sums(be, prior);
    Buf<bf16_t> want(be, static_cast<size_t>(rows * C)), got(be, static_cast<size_t>(rows * C));
    be.bias_backward(want_sums.data(), d_dy.data(), rows, C);
    be.fp32_to_bf16(want.data(), d_dy.data(), rows * C);
    be.bias_backward_bf16(got_sums.data(), got.data(), d_dy.data(), rows, C);
    EXPECT_TRUE(test::same_bits(got_sums.to_host(), want_sums.to_host()));
    EXPECT_EQ(got.to_host(), want.to_host());
  }
}

TEST(BackendOps, NormsAgreeWithTheReferenceOnEveryBackend) {
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    for (const NormCase& c : kNormCases) {
      SCOPED_TRACE(be.name() + " " + c.name());
      const int64_t n = c.rows * c.C;
      const NormInputs in{test::random_normal(n, 4, 2.0f), test::random_normal(n, 5),
                          test::random_normal(c.C, 6), test::random_normal(c.C, 7)};
      // The reference normalizes s = x + r (a float add, as every backend does) in double.
      Vec s = in.x;
      if (c.residual)
        for (int64_t i = 0; i < n; ++i) s[i] = in.x[i] + in.r[i];
      Vec want(static_cast<size_t>(n)), mean(static_cast<size_t>(c.rows)), rstd(mean.size());
      const bool ln = c.kind == Normalization::LayerNorm;
      cpu::ref::norm_forward(c.kind, want.data(), mean.data(), rstd.data(), s.data(),
                             in.gamma.data(), in.beta.data(), c.rows, c.C, kNormEps);
      Produced y(be, c.out, n);
      const Buf<float> x(be, in.x), r(be, in.r), g(be, in.gamma), b(be, in.beta);
      Buf<float> sum(be, static_cast<size_t>(n)), d_mean(be, static_cast<size_t>(c.rows)),
          d_rstd(be, static_cast<size_t>(c.rows));
      be.norm_forward({c.kind, g.data(), ln ? b.data() : nullptr, c.C, kNormEps},
                      {d_mean.data(), d_rstd.data()}, y.out(), c.residual ? sum.data() : nullptr,
                      x.data(), c.residual ? r.data() : nullptr, c.rows);
      if (c.residual) {
        EXPECT_TRUE(test::same_bits(sum.to_host(), s));
      }
      // FP32: the row statistics' rounding (test_kernel_norms.cpp's kRowTol, 32 units of
      // 2^-24 relative to 1 + |y|), plus the output dtype's rounding.
      const double unit = 32 * 0x1p-24;
      y.expect_near(
          want, [&](double w) { return unit * (1 + std::fabs(w)); }, unit);
    }
  }
}

// Bias + activation into each output dtype, and the unfused order (no bias: fc1 added it).
struct ActCase {
  Activation act;
  int64_t rows, F;
  DType out;
  bool bias;
  std::string name() const {
    return std::string(activation_name(act)) + " " + std::to_string(rows) + "x" +
           std::to_string(F) + " -> " + std::string(dtype_name(out)) + (bias ? " (+ bias)" : "");
  }
};

// Every activation of FP8LM_ACTIVATIONS in every output dtype, with and without a bias.
std::vector<ActCase> act_cases() {
  std::vector<ActCase> cases;
  for (std::string_view name : activation_names()) {
    const Activation a = parse_activation(name);
    cases.push_back({a, 7, 33, DType::F32, true});
    cases.push_back({a, 6, 17, DType::F32, false});
    cases.push_back({a, 16, 32, DType::E4M3, false});
    cases.push_back({a, 16, 64, DType::E5M2, true});
    cases.push_back({a, 5, 48, DType::BF16, true});
  }
  return cases;
}

TEST(BackendOps, ActivationsAgreeWithTheReferenceOnEveryBackend) {
  // FP32 math with tanh/exp to a few ulps, grown by the derivative's factor (1 + |u|, at most
  // about 5 for N(0, 1) inputs) as test_kernel_activations.cpp allows per value: 64 units of
  // 2^-24 relative to 1 + |y| covers it, for the forward and for dy times the derivative.
  const double unit = 64 * 0x1p-24;
  const auto tol = [&](double w) { return unit * (1 + std::fabs(w)); };
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    for (const ActCase& c : act_cases()) {
      SCOPED_TRACE(be.name() + " " + c.name());
      const int64_t h_cols = activation_input_width(c.act, c.F), n = c.rows * c.F;
      const Vec h0 = test::random_normal(c.rows * h_cols, 8), bias = test::random_normal(h_cols, 9);
      Vec h_want = h0;  // the bias added in float, as every backend adds it
      if (c.bias) {
        for (int64_t r = 0; r < c.rows; ++r)
          for (int64_t j = 0; j < h_cols; ++j) h_want[r * h_cols + j] += bias[j];
      }
      Vec want(static_cast<size_t>(n));
      cpu::ref::act_forward(want.data(), h_want.data(), c.act, c.rows, c.F);

      Produced y(be, c.out, n);
      Buf<float> h(be, h0);
      const Buf<float> b(be, bias);
      be.bias_act_forward(y.out(), h.data(), c.bias ? b.data() : nullptr, c.act, c.rows, c.F);
      EXPECT_TRUE(test::same_bits(h.to_host(), h_want));  // h keeps the pre-activation
      y.expect_near(want, tol, unit);

      const Vec dy = test::random_normal(n, 10);
      Vec dh_want(h_want.size());
      cpu::ref::act_backward(dh_want.data(), dy.data(), h_want.data(), c.act, c.rows, c.F);
      Buf<float> dh(be, h_want.size());
      const Buf<float> d_dy(be, dy);
      be.act_backward(dh.data(), d_dy.data(), h.data(), c.act, c.rows, c.F);
      const Vec got = dh.to_host();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], dh_want[i], tol(dh_want[i])) << "dh at " << i;

      // h kept in BF16 (a saved activation): the bits of act_backward on it widened.
      std::vector<bf16_t> h16_host(h_want.size());
      Vec widened(h_want.size());
      for (size_t i = 0; i < h16_host.size(); ++i) {
        h16_host[i] = bf16_from_float(h_want[i]);
        widened[i] = bf16_to_float(h16_host[i]);
      }
      const Buf<bf16_t> h16(be, h16_host);
      Buf<float> d_widened(be, widened), dh16(be, h_want.size()), work(be, h_want.size());
      be.act_backward(dh.data(), d_dy.data(), d_widened.data(), c.act, c.rows, c.F);
      be.act_backward_bf16(dh16.data(), d_dy.data(), h16.data(), work.data(), c.act, c.rows, c.F);
      EXPECT_TRUE(test::same_bits(dh16.to_host(), dh.to_host()));
    }
  }
}

// Fails once, naming the worst element, if |got - want| > tol anywhere.
void expect_within(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (e > worst_err) worst_err = e, worst = i;
  }
  EXPECT_LE(worst_err, tol) << what << ": element " << worst;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

Vec bf16_values(Vec v) {
  for (float& x : v) x = bf16_to_float(bf16_from_float(x));
  return v;
}

struct AttentionCase {
  int64_t B, T, C, H, Hkv;  // Hkv < H: grouped-query attention
};

TEST(BackendOps, AttentionAgreesWithTheReferenceOnEveryBackend) {
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    // Head sizes 16 (CUDA's flash kernels) and 6 (its plain path); groups of 1, 2 and 4.
    for (const AttentionCase& c : {AttentionCase{2, 7, 32, 2, 2}, AttentionCase{1, 33, 64, 4, 4},
                                   AttentionCase{2, 70, 64, 4, 2}, AttentionCase{1, 9, 24, 4, 1}}) {
      SCOPED_TRACE(be.name() + " B" + std::to_string(c.B) + " T" + std::to_string(c.T) + " C" +
                   std::to_string(c.C) + " H" + std::to_string(c.H) + " Hkv" +
                   std::to_string(c.Hkv));
      const int64_t rows = c.B * c.T, row = QkvLayout(c.C, c.H, c.Hkv).row;
      // BF16 values, so a backend that multiplies in BF16 takes them exactly.
      const Vec qkv = bf16_values(test::random_normal(rows * row, 11)),
                dout = bf16_values(test::random_normal(rows * c.C, 12));
      Vec out(static_cast<size_t>(rows * c.C)), lse(static_cast<size_t>(c.B * c.H * c.T)),
          dqkv(qkv.size());
      cpu::ref::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.H, c.Hkv);
      cpu::ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                   c.B, c.T, c.C, c.H, c.Hkv);
      const Buf<float> d_qkv(be, qkv), d_dout(be, dout);
      Buf<float> d_out(be, out.size()), d_lse(be, lse.size()), d_dqkv(be, dqkv.size());
      const AttentionShape shape{c.B, c.T, c.C, c.H, c.Hkv};
      be.attention_forward(shape, d_out.data(), d_lse.data(), d_qkv.data());
      be.attention_backward(shape, d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out.data(),
                            d_lse.data());
      // FP32 sums over a head's hd products and T keys: (hd + T) roundings of the largest value
      // (test_kernel_attention.cpp's float_sum_tolerance), twice for two summation orders; a
      // shared key/value head's gradient sums its group's (H / Hkv terms more).
      // A backend rounding P and dS (to BF16) errs by that rounding of the terms' magnitude,
      // which for these N(0, 1) inputs stays within 4x the largest result (the per-element
      // bounds are test_cuda_attention.cpp's); lse takes FP32 scores of exact products.
      const double units = 2 * static_cast<double>(c.C / c.H + c.T + c.H / c.Hkv) * 0x1p-24,
                   inner = 4 * bt.attention_rounding;
      expect_within(d_out.to_host(), out, (units + inner) * max_abs(out), "out");
      expect_within(d_lse.to_host(), lse, 4 * units * max_abs(lse), "lse");
      expect_within(d_dqkv.to_host(), dqkv, (units + inner) * max_abs(dqkv), "dqkv");

      // q, k and v as saved in BF16, FP32 math and BF16: the bits of backward on them widened.
      std::vector<bf16_t> qkv16(qkv.size());
      for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = bf16_from_float(qkv[i]);
      const Buf<bf16_t> d_qkv16(be, qkv16);
      for (const bool bf16 : {false, true}) {
        const AttentionShape s{c.B, c.T, c.C, c.H, c.Hkv, bf16};
        Buf<float> want(be, dqkv.size()), got(be, dqkv.size()), work(be, qkv.size());
        be.attention_forward(s, d_out.data(), d_lse.data(), d_qkv.data());
        be.attention_backward(s, want.data(), d_dout.data(), d_qkv.data(), d_out.data(),
                              d_lse.data());
        be.attention_backward_bf16_qkv(s, got.data(), d_dout.data(), d_qkv16.data(), work.data(),
                                       d_out.data(), d_lse.data());
        EXPECT_TRUE(test::same_bits(got.to_host(), want.to_host())) << "bf16 math " << bf16;
      }
    }
  }
}

TEST(BackendOps, KvCacheDecodeAgreesWithTheReferenceOnEveryBackend) {
  // A short cache; one past 12,288 keys (issue 34: the CUDA kernel once kept a score per key
  // in 48 KB of shared memory) and past a tile of 4096; a head of 256 values.
  struct Shape {
    int64_t B, Tmax, len, C, H;
  };
  for (const Shape& sh :
       {Shape{2, 12, 9, 32, 4}, Shape{1, 13000, 12999, 16, 2}, Shape{1, 40, 33, 512, 2}}) {
    const auto [B, Tmax, len, C, H] = sh;
    for (const int64_t Hkv : {H, H / 2}) {
      const int64_t kv = Hkv * (C / H);
      const Vec q = test::random_normal(B * C, 19), k = test::random_normal(B * Tmax * kv, 20),
                v = test::random_normal(B * Tmax * kv, 21);
      Vec want(static_cast<size_t>(B * C));
      cpu::ref::attention_decode(want.data(), q.data(), k.data(), v.data(), B, Tmax, len, C, H,
                                 Hkv);
      for (const BackendUnderTest& bt : present_backends()) {
        Backend& be = bt.be;
        SCOPED_TRACE(be.name() + " len " + std::to_string(len) + " C " + std::to_string(C) +
                     " Hkv " + std::to_string(Hkv));
        const Buf<float> d_q(be, q), d_k(be, k), d_v(be, v);
        Buf<float> out(be, want.size());
        be.attention_decode({B, Tmax, C, H, Hkv}, len, out.data(), d_q.data(), d_k.data(),
                            d_v.data());
        // FP32 sums over hd products and len keys, in two orders (as the attention rows); the
        // output is a weighted mean of v's rows, so each rounding is of at most max |v|.
        const double units = 2 * static_cast<double>(C / H + len) * 0x1p-24;
        expect_within(out.to_host(), want, units * max_abs(v), "out");
      }
    }
  }
}

TEST(BackendOps, RopeAgreesWithTheReferenceOnEveryBackend) {
  // 3 sequences of 5 positions, q and k heads (4 + 2) of 16 values, then 32 v columns.
  const int64_t rows = 15, len = 5, heads = 6, hd = 16, stride = heads * hd + 32;
  const Vec x = test::random_normal(rows * stride, 23);
  for (const bool inverse : {false, true}) {
    for (const int64_t pos0 : {int64_t{0}, int64_t{40}}) {
      Vec want = x;
      cpu::ref::rope(want.data(), rows, len, pos0, stride, heads, hd, 10000.0f, inverse);
      for (const BackendUnderTest& bt : present_backends()) {
        Backend& be = bt.be;
        SCOPED_TRACE(be.name() + (inverse ? " inverse" : "") + " pos0 " + std::to_string(pos0));
        Buf<float> d_x(be, x);
        be.rope(d_x.data(), rows, len, pos0, stride, heads, hd, 10000.0f, inverse);
        // The same float cos and sin everywhere; a backend rounds its two products and their
        // sum, the reference once (kernels/cpu/rope.h): 4 units of the largest |a| + |b|.
        expect_within(d_x.to_host(), want, 8 * 0x1p-24 * max_abs(x), "x");
      }
    }
  }
}

// TE's cast_transpose (quantize_transposed) and the codes' transpose: both layouts' codes and
// the cast's amax and counts bit for bit the reference quantize's, with the row-wise codes
// written or skipped, over ragged tile edges.
TEST(BackendOps, Fp8TransposesAgreeWithTheReferenceOnEveryBackend) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 45}, {33, 17}, {70, 96}}) {
    const int64_t n = rows * cols;
    const Vec x = test::random_with_specials(static_cast<size_t>(n), 29);
    for (const DType f : {DType::E4M3, DType::E5M2}) {
      std::vector<uint8_t> want(static_cast<size_t>(n)), want_t(want.size());
      const CastStats want_stats = quantize(want.data(), x.data(), n, 48.0f, f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          want_t[size_t(c * rows + r)] = want[size_t(r * cols + c)];
      for (const BackendUnderTest& bt : present_backends()) {
        Backend& be = bt.be;
        for (const bool rowwise : {true, false}) {
          SCOPED_TRACE(be.name() + " " + std::string(dtype_short_name(f)) + " " +
                       std::to_string(rows) + "x" + std::to_string(cols) +
                       (rowwise ? "" : " transposed only"));
          const Buf<float> d_x(be, x), scale(be, Vec{48.0f});
          Buf<float> amax(be, Vec{0.0f});
          Buf<unsigned long long> counts(be, std::vector<unsigned long long>{0, 0});
          const std::vector<uint8_t> zeros(want.size());
          Buf<uint8_t> codes(be, zeros), t(be, zeros), back(be, zeros);
          be.quantize_transposed({rowwise ? codes.data() : nullptr, scale.data(), amax.data(), f,
                                  counts.data(), counts.data() + 1},
                                 t.data(), d_x.data(), rows, cols);
          if (rowwise) {
            EXPECT_EQ(codes.to_host(), want);
          }
          EXPECT_EQ(t.to_host(), want_t);
          const auto k = counts.to_host();
          test::expect_same_stats(
              {amax.to_host()[0], static_cast<int64_t>(k[0]), static_cast<int64_t>(k[1])},
              want_stats);
          be.transpose_fp8(back.data(), t.data(), cols, rows);
          EXPECT_EQ(back.to_host(), want);
        }
      }
    }
  }
}

TEST(BackendOps, EmbeddingAgreesWithTheReferenceOnEveryBackend) {
  const int64_t batch = 3, len = 5, C = 16, V = 4;  // few tokens: repeats accumulate
  std::vector<int32_t> tokens(static_cast<size_t>(batch * len));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 1) % V);
  const Vec wte = test::random_normal(V * C, 13), wpe = test::random_normal(len * C, 14),
            dout = test::random_normal(batch * len * C, 15), g0 = test::random_normal(V * C, 16),
            p0 = test::random_normal(len * C, 17);
  Vec out(dout.size()), dwte = g0, dwpe = p0;
  cpu::ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, len, C);
  cpu::ref::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), batch, len, C);
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    SCOPED_TRACE(be.name());
    const Buf<int32_t> d_tokens(be, tokens);
    const Buf<float> d_wte(be, wte), d_wpe(be, wpe), d_dout(be, dout);
    Buf<float> d_out(be, out.size()), d_dwte(be, g0), d_dwpe(be, p0);
    be.embedding_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), batch, len, C);
    be.embedding_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), batch, len,
                          C);
    // One float add per output: exact as the reference's rounded double sum.
    EXPECT_TRUE(test::same_bits(d_out.to_host(), out));
    // Gradients: up to batch * len float additions into each row (the reference sums in double).
    const double units = static_cast<double>(batch * len + 1) * 0x1p-24;
    expect_within(d_dwte.to_host(), dwte, units * (max_abs(dwte) + max_abs(dout) * batch * len),
                  "dwte");
    expect_within(d_dwpe.to_host(), dwpe, units * (max_abs(dwpe) + max_abs(dout) * batch), "dwpe");

    // Without a position table (rotary embeddings): the token rows alone, dwte as before.
    Vec no_positions(out.size()), dwte_alone = g0;
    cpu::ref::embedding_forward(no_positions.data(), tokens.data(), wte.data(), nullptr, batch, len,
                                C);
    cpu::ref::embedding_backward(dwte_alone.data(), nullptr, dout.data(), tokens.data(), batch, len,
                                 C);
    Buf<float> d_dwte_alone(be, g0);
    be.embedding_forward(d_out.data(), d_tokens.data(), d_wte.data(), nullptr, batch, len, C);
    be.embedding_backward(d_dwte_alone.data(), nullptr, d_dout.data(), d_tokens.data(), batch, len,
                          C);
    EXPECT_TRUE(test::same_bits(d_out.to_host(), no_positions));
    EXPECT_TRUE(test::same_bits(d_dwte_alone.to_host(), d_dwte.to_host()));
  }
}

TEST(BackendOps, CrossEntropyAgreesWithTheReferenceOnEveryBackend) {
  const int64_t rows = 9, V = 37;
  const Vec logits = test::random_normal(rows * V, 18, 0.0f, 3.0f);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) targets[r] = r == 4 ? -1 : static_cast<int32_t>(r * 5 % V);
  const float grad_scale = 1.0f / rows;
  Vec dlogits(logits.size());
  const float mean = cpu::ref::softmax_cross_entropy(dlogits.data(), nullptr, logits.data(),
                                                     targets.data(), rows, V, grad_scale);
  // test_kernel_cross_entropy.cpp's kTol: FP32 exp and sums over V, relative to 1 + |loss| and
  // to grad_scale + |dlogit|.
  const double tol = 32 * 0x1p-24;
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    SCOPED_TRACE(be.name());
    const Buf<int32_t> d_targets(be, targets);
    // dlogits overwrite the logits, as the model runs it; the row losses stay on the backend
    // and their mean is taken on the host (mean_loss), as every backend's caller does.
    Buf<float> d_logits(be, logits), d_losses(be, Vec(static_cast<size_t>(rows), -1.0f));
    be.softmax_cross_entropy_rows(d_logits.data(), d_losses.data(), d_logits.data(),
                                  d_targets.data(), rows, V, grad_scale);
    const Vec losses = d_losses.to_host();
    EXPECT_EQ(losses[4], 0.0f) << "an ignored row";
    const float got = mean_loss(losses.data(), targets.data(), rows);
    EXPECT_NEAR(got, mean, tol * (1 + std::fabs(mean)));
    const Vec d = d_logits.to_host();
    for (size_t i = 0; i < d.size(); ++i)
      ASSERT_NEAR(d[i], dlogits[i], tol * (grad_scale + std::fabs(dlogits[i]))) << "at " << i;
    // A target outside the vocabulary is the caller's to refuse before upload: a device's
    // kernel cannot throw (kernels/cuda/loss_embedding.h).
    std::vector<int32_t> bad = targets;
    bad[2] = static_cast<int32_t>(V);
    EXPECT_THROW(check_targets(bad.data(), rows, V), Error);
  }
}

// A tensor read from a file goes to its home through fill_bytes and comes back out through
// read_bytes, a piece at a time on a device (through one staging buffer of 16 MB: this buffer
// needs two pieces, the second partial), in place on the host.
// The optimizer over a table of tensors of awkward sizes (one past a chunk, one empty, one
// without decay): the norm against a double sum, three AdamW steps against AdamW in double, and
// one call over the table the same bits as a call per tensor (--no-fusion's order).
TEST(BackendOps, OptimizerAgreesWithTheReferenceOnEveryBackend) {
  const int64_t sizes[] = {16385, 0, 7, 1000};
  const AdamWHyper h{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    SCOPED_TRACE(be.name());
    struct Tensor {
      Vec w, g, m, v;
      float decay;
    };
    std::vector<Tensor> host;
    double squares = 0;
    for (size_t k = 0; k < std::size(sizes); ++k) {
      const auto seed = static_cast<uint32_t>(10 * k);
      host.push_back({test::random_normal(sizes[k], seed), test::random_normal(sizes[k], seed + 1),
                      Vec(sizes[k], 0.0f), Vec(sizes[k], 0.0f), k == 2 ? 0.0f : 0.1f});
      for (const float g : host.back().g) squares += static_cast<double>(g) * g;
    }
    // Each backend's buffers, twice: one table stepped whole, one tensor at a time.
    std::vector<std::vector<Buf<float>>> bufs(2);
    std::vector<AdamWTensor> tables[2];
    for (int copy = 0; copy < 2; ++copy) {
      for (const Tensor& t : host) {
        for (const Vec* x : {&t.w, &t.g, &t.m, &t.v}) bufs[copy].emplace_back(be, *x);
        auto* b = &bufs[copy][bufs[copy].size() - 4];
        tables[copy].push_back({b[0].data(), b[1].data(), nullptr, b[2].data(), b[3].data(),
                                static_cast<int64_t>(t.w.size()), t.decay});
      }
    }
    int64_t total = 0;
    for (const int64_t n : sizes) total += n;
    const Buf<AdamWTensor> whole(be, tables[0]), each(be, tables[1]);
    Buf<float> norm_clip(be, Vec{0.0f, 0.0f}), scale(be, Vec{0.5f});
    be.grad_norm(norm_clip.data(), norm_clip.data() + 1, 1.0f, whole.data(), 4, total);
    const Vec nc = norm_clip.to_host();
    // One double partial per chunk, summed in double: within a few units of the exact sum.
    EXPECT_NEAR(nc[0], std::sqrt(squares), 4e-7 * std::sqrt(squares));
    EXPECT_EQ(nc[1], 1.0f / (nc[0] + 1e-6f)) << "the clip factor for max_norm 1";
    std::vector<Tensor> want = host;
    for (int step = 1; step <= 3; ++step) {
      AdamWHyper hs = h;
      hs.bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(step));
      hs.bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(step));
      be.adamw_step(whole.data(), 4, total, hs, scale.data(), nullptr);
      for (int k = 0; k < 4; ++k)
        be.adamw_step(each.data() + k, 1, sizes[k], hs, scale.data(), nullptr);
      for (Tensor& t : want) {
        for (size_t j = 0; j < t.w.size(); ++j) {
          const double g = 0.5 * t.g[j];
          const double m = h.beta1 * static_cast<double>(t.m[j]) + (1.0 - h.beta1) * g;
          const double v = h.beta2 * static_cast<double>(t.v[j]) + (1.0 - h.beta2) * g * g;
          const double update = m / hs.bc1 / (std::sqrt(v / hs.bc2) + h.eps);
          t.w[j] = static_cast<float>(t.w[j] - h.lr * (update + t.decay * t.w[j]));
          t.m[j] = static_cast<float>(m);
          t.v[j] = static_cast<float>(v);
        }
      }
    }
    for (size_t k = 0; k < host.size(); ++k) {
      const Vec w = bufs[0][4 * k].to_host();
      EXPECT_TRUE(test::same_bits(bufs[1][4 * k].to_host(), w)) << "tensor " << k;
      // Each step rounds w to float on both sides, which may differ by a unit when the float
      // update (good to a few units of 2^-24 of lr * |update| <= about 3 lr) moves the value
      // across a rounding boundary: 4 units of w over three steps, plus the update's error. A
      // slip in the math (a bias correction, the decay) moves w by about lr = 1e-2.
      for (size_t j = 0; j < w.size(); ++j)
        ASSERT_NEAR(w[j], want[k].w[j], 4 * 0x1p-24 * std::fabs(want[k].w[j]) + 1e-7)
            << k << " " << j;
    }
  }
}

// Issue 34: a step decided where the gradients are. decide_step skips on any non-finite row
// loss (one far into the rows, past the first thread's share) or norm and keeps the step count;
// otherwise it counts the step and takes its bias corrections from the host's table. AdamW
// with the decision changes nothing when it skips, and otherwise gives the bits of AdamW with
// the host's hyper-parameters; copy_if copies only when its flag is set.
TEST(BackendOps, StepDecidedOnTheBackendGatesTheOptimizer) {
  const int64_t rows = 3000, n = 1001;
  const AdamWHyper h{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  Vec table(2 * 8);
  for (int t = 0; t < 8; ++t) {
    table[2 * t] = 1.0f - std::pow(h.beta1, static_cast<float>(t));
    table[2 * t + 1] = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  }
  for (const BackendUnderTest& bt : present_backends()) {
    Backend& be = bt.be;
    SCOPED_TRACE(be.name());
    const Buf<float> bias(be, table);
    StepDecision start;
    start.steps = 2;
    Buf<StepDecision> d(be, std::vector<StepDecision>{start});
    Vec losses(rows, 2.5f);
    Buf<float> norm(be, Vec{3.0f});
    const auto decide = [&](const Vec& l, float nm) {
      const Buf<float> dl(be, l);
      norm.upload({nm}, "norm");
      be.decide_step(d.data(), dl.data(), rows, norm.data(), bias.data());
      return d.to_host()[0];
    };
    StepDecision got = decide(losses, 3.0f);
    EXPECT_EQ(got.skip, 0);
    EXPECT_EQ(got.steps, 3);
    EXPECT_EQ(got.bc1, table[6]);
    EXPECT_EQ(got.bc2, table[7]);
    Vec bad = losses;
    bad[2999] = NAN;
    EXPECT_EQ(decide(bad, 3.0f).skip, 1);
    EXPECT_EQ(d.to_host()[0].steps, 3) << "a skipped step is not counted";
    bad = losses;
    bad[1777] = -INFINITY;
    EXPECT_EQ(decide(bad, 3.0f).skip, 1);
    EXPECT_EQ(decide(losses, INFINITY).skip, 1);
    got = decide(losses, 3.0f);
    EXPECT_EQ(got.skip, 0);
    EXPECT_EQ(got.steps, 4);

    // AdamW as decided: step 4's bias corrections, as the host would pass them.
    const Vec w0 = test::random_normal(n, 5), g = test::random_normal(n, 6);
    const auto run = [&](const StepDecision* decision, const AdamWHyper& hyper) {
      Buf<float> w(be, w0), gb(be, g), m(be, Vec(n, 0.1f)), v(be, Vec(n, 0.2f));
      const Buf<AdamWTensor> t(be, std::vector<AdamWTensor>{{w.data(), gb.data(), nullptr, m.data(),
                                                             v.data(), n, 0.1f}});
      be.adamw_step(t.data(), 1, n, hyper, nullptr, decision);
      return std::vector<Vec>{w.to_host(), m.to_host(), v.to_host()};
    };
    AdamWHyper host = h;
    host.bc1 = table[8];
    host.bc2 = table[9];
    const std::vector<Vec> taken = run(d.data(), h), want = run(nullptr, host);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(test::same_bits(taken[k], want[k])) << k;
    decide(bad, 3.0f);
    const std::vector<Vec> skipped = run(d.data(), h);
    EXPECT_TRUE(test::same_bits(skipped[0], w0));
    EXPECT_TRUE(test::same_bits(skipped[1], Vec(n, 0.1f)));
    EXPECT_TRUE(test::same_bits(skipped[2], Vec(n, 0.2f)));

    // copy_if, of an odd size at an odd offset.
    const std::vector<int32_t> yes{1}, no{0};
    const Buf<int32_t> flag_yes(be, yes), flag_no(be, no);
    const Vec src = test::random_normal(333, 7);
    Buf<float> a(be, Vec(333, 0.0f)), b(be, Vec(333, 0.0f));
    const Buf<float> from(be, src);
    const size_t bytes = 331 * sizeof(float) - 3;
    be.copy_if(a.data() + 1, from.data() + 1, bytes, flag_no.data());
    be.copy_if(b.data() + 1, from.data() + 1, bytes, flag_yes.data());
    EXPECT_TRUE(test::same_bits(a.to_host(), Vec(333, 0.0f)));
    Vec want_b(333, 0.0f);
    std::memcpy(reinterpret_cast<char*>(want_b.data() + 1), src.data() + 1, bytes);
    EXPECT_TRUE(test::same_bits(b.to_host(), want_b));
  }
}

TEST(BackendOps, BuffersFillAndReadBackByPieces) {
  const size_t n = (size_t{20} << 20) / sizeof(float);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000003) - 5e5f;
  const auto* src = reinterpret_cast<const uint8_t*>(values.data());
  for (const BackendUnderTest& bt : present_backends()) {
    SCOPED_TRACE(bt.be.name());
    BackendBuffer<float> buf(bt.be, n);
    size_t filled = 0, pieces = 0;
    buf.fill_bytes([&](std::span<uint8_t> piece) {
      std::memcpy(piece.data(), src + filled, piece.size());
      filled += piece.size();
      ++pieces;
    });
    EXPECT_EQ(filled, n * sizeof(float));
    EXPECT_EQ(pieces, bt.be.host_memory() ? 1u : 2u);
    EXPECT_EQ(buf.to_host(), values);
    size_t read = 0;
    bool same = true;
    buf.read_bytes([&](std::span<const uint8_t> piece) {
      same &= std::memcmp(piece.data(), src + read, piece.size()) == 0;
      read += piece.size();
    });
    EXPECT_EQ(read, n * sizeof(float));
    EXPECT_TRUE(same);
  }
}

// Each backend says which optional ops it has; require() refuses the first it lacks by name,
// and so does the op itself if called anyway. The CPU has them all.
TEST(BackendOps, AnOpADeviceLacksIsRefusedByName) {
  const std::vector<OptionalOp> all = {
#define FP8LM_OPTIONAL_OP_ITEM(e, what) OptionalOp::e,
      FP8LM_OPTIONAL_OPS(FP8LM_OPTIONAL_OP_ITEM)
#undef FP8LM_OPTIONAL_OP_ITEM
  };
  for (const OptionalOp op : all) EXPECT_TRUE(cpu_backend().supports(op)) << optional_op_name(op);
  for (const BackendUnderTest& bt : present_backends()) {
    for (const OptionalOp op : all) {
      SCOPED_TRACE(bt.be.name() + ": " + std::string(optional_op_name(op)));
      if (bt.be.supports(op)) {
        EXPECT_NO_THROW(bt.be.require({op}));
        continue;
      }
      test::expect_error([&] { bt.be.require({op}); }, std::string(optional_op_name(op)) +
                                                           " is not available on " + bt.be.name());
    }
    if (!bt.be.supports(OptionalOp::Bf16GradAccumulation)) {
      test::expect_error([&] { bt.be.accumulate_into_bf16(nullptr, nullptr, 1); },
                         "not available on " + bt.be.name());
    }
  }
}

}  // namespace
}  // namespace fp8lm
