// The device optimizer against train/adamw.h: the global gradient norm and clip factor, and
// AdamW over several tensors of awkward sizes (one launch for all), with the FP8 re-quantization
// of --fp8-weights against fp8lm::quantize.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "fp8/quantize.h"
#include "kernels/cuda/optimizer.h"
#include "nn/parameter.h"
#include "test_util.h"
#include "train/adamw.h"

namespace fp8lm {
namespace {

using test::random_normal;
using test::same_bits;
using Vec = std::vector<float>;

// Sizes: one element, not a multiple of anything, none (the table must skip it), more than
// a block's span, and a small one after it.
struct Spec {
  int64_t n;
  bool decay;
};
const Spec kSpecs[] = {{1, false}, {1000, true}, {0, false}, {70000, true}, {33, false}};

std::vector<std::unique_ptr<Parameter>> make_params(uint32_t seed) {
  std::vector<std::unique_ptr<Parameter>> ps;
  for (const Spec& s : kSpecs) {
    // fmt, not "p" + std::to_string(): GCC 12 at -O3 warns (-Wrestrict) inside the latter.
    auto p = std::make_unique<Parameter>(fmt::format("p{}", ps.size()), std::vector<int64_t>{s.n},
                                         s.decay);
    p->set_values(random_normal(s.n, seed++, 0.0f, 0.5f));
    ps.push_back(std::move(p));
  }
  return ps;
}

ParameterList list_of(const std::vector<std::unique_ptr<Parameter>>& ps) {
  ParameterList l;
  for (const auto& p : ps) l.push_back(p.get());
  return l;
}

// Gradients of different magnitudes per tensor, new for each seed.
void fill_grads(const ParameterList& ps, uint32_t seed) {
  float stddev = 1e-3f;
  for (Parameter* p : ps) {
    p->grad.upload(random_normal(p->numel(), seed++, 0.0f, stddev), p->name);
    stddev *= 10.0f;
  }
}

Vec download(const float* p, int64_t n) {
  return n == 0 ? Vec{} : cuda::to_host(p, static_cast<size_t>(n));
}

// The device copy of a parameter list: values, gradients, moments and the tensor table.
struct Mirror {
  std::vector<DeviceBuffer<float>> value, grad, m, v;
  std::vector<cuda::AdamWTensor> table;
  DeviceBuffer<cuda::AdamWTensor> d_table;
  int64_t total = 0;

  Mirror(const ParameterList& ps, float weight_decay) {
    for (const Parameter* p : ps) {
      const auto n = static_cast<size_t>(p->numel());
      value.emplace_back(n);
      grad.emplace_back(n);
      m.emplace_back(n);
      v.emplace_back(n);
      if (n > 0) cuda::upload(value.back().data(), p->value.data(), n);
      m.back().zero();
      v.back().zero();
      cuda::AdamWTensor t;
      t.param = value.back().data();
      t.grad = grad.back().data();
      t.m = m.back().data();
      t.v = v.back().data();
      t.n = p->numel();
      t.decay = p->decay ? weight_decay : 0.0f;
      table.push_back(t);
      total += p->numel();
    }
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());  // the moments' memsets
    upload_table();
  }
  void upload_table() { d_table = cuda::to_device(table); }
  void upload_grads(const ParameterList& ps) {
    for (size_t i = 0; i < ps.size(); ++i)
      if (ps[i]->numel() > 0) cuda::upload(grad[i].data(), ps[i]->grad.data(), ps[i]->grad.size());
  }
  int n_tensors() const { return static_cast<int>(table.size()); }
};

TEST(CudaOptimizer, GradNormAndClipMatchCpu) {
  FP8LM_REQUIRE_CUDA();
  auto owned = make_params(1);
  const ParameterList ps = list_of(owned);
  fill_grads(ps, 100);
  Mirror dev(ps, 0.1f);
  dev.upload_grads(ps);
  const float want = grad_norm(ps);

  DeviceBuffer<float> out(2);  // norm, clip
  const float max_norms[] = {0.0f, 2.0f * want, want / 3.0f};
  for (float max_norm : max_norms) {
    SCOPED_TRACE(max_norm);
    cuda::grad_norm(out.data(), out.data() + 1, max_norm, dev.d_table.data(), dev.n_tensors(),
                    dev.total, nullptr);
    const Vec got = cuda::to_host(out.data(), 2);
    // Both sum exact double squares in double, in different orders: a relative difference
    // near 1e-16 before the one rounding to float, so the float norms are equal or 1 ulp
    // apart (when the exact norm lies next to a rounding boundary).
    EXPECT_NEAR(got[0], want, 0x1p-23 * want);
    // The clip factor is the same float formula: the same bits given the same norm.
    EXPECT_EQ(got[1], clip_factor(got[0], max_norm));
    if (max_norm == 0.0f || max_norm > want) {
      EXPECT_EQ(got[1], 1.0f);
    }
  }
  // clip is optional.
  cuda::grad_norm(out.data(), nullptr, 1.0f, dev.d_table.data(), dev.n_tensors(), dev.total,
                  nullptr);
  EXPECT_NEAR(cuda::to_host(out.data(), 1)[0], want, 0x1p-23 * want);
}

TEST(CudaOptimizer, AdamWMatchesCpuBitsOverThreeSteps) {
  FP8LM_REQUIRE_CUDA();
  auto owned = make_params(2);
  const ParameterList ps = list_of(owned);
  const AdamWConfig cfg;  // beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
  AdamW cpu(ps, cfg);
  Mirror dev(ps, cfg.weight_decay);

  // --fp8-weights on two tensors: E4M3 on p1, E5M2 on p3, scales that saturate a few values.
  struct Requant {
    size_t index;
    Fp8Format format;
    float scale;
  };
  const Requant requants[] = {{1, Fp8Format::E4M3, 1000.0f}, {3, Fp8Format::E5M2, 60000.0f}};
  std::vector<DeviceBuffer<uint8_t>> codes;
  DeviceBuffer<float> scales(2), amaxes(2);
  DeviceBuffer<unsigned long long> counts(4);  // saturated, flushed per requant
  const Vec scale_values = {requants[0].scale, requants[1].scale};
  cuda::upload(scales.data(), scale_values.data(), 2);
  for (size_t k = 0; k < 2; ++k) {
    cuda::AdamWTensor& t = dev.table[requants[k].index];
    codes.emplace_back(static_cast<size_t>(t.n));
    t.requant.data = codes.back().data();
    t.requant.scale = scales.data() + k;
    t.requant.amax = amaxes.data() + k;
    t.requant.format = requants[k].format;
    t.requant.saturated = counts.data() + 2 * k;
    t.requant.flushed = counts.data() + 2 * k + 1;
  }
  dev.upload_table();

  const float lrs[] = {1e-3f, 3e-3f, 6e-4f};
  const float grad_scales[] = {0.7f, 1.3f, 0.25f};
  DeviceBuffer<float> d_grad_scale(1);
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    const float lr = lrs[step - 1], gs = grad_scales[step - 1];
    fill_grads(ps, 200 + 10 * static_cast<uint32_t>(step));
    dev.upload_grads(ps);
    cuda::upload(d_grad_scale.data(), &gs, 1);
    amaxes.zero();
    counts.zero();

    cpu.step(lr, gs);
    cuda::AdamWHyper h;
    h.lr = lr;
    h.beta1 = cfg.beta1;
    h.beta2 = cfg.beta2;
    h.eps = cfg.eps;
    // As AdamW::step computes them.
    h.bc1 = 1.0f - std::pow(cfg.beta1, static_cast<float>(step));
    h.bc2 = 1.0f - std::pow(cfg.beta2, static_cast<float>(step));
    cuda::adamw_step(dev.d_table.data(), dev.n_tensors(), dev.total, h, d_grad_scale.data(),
                     nullptr);

    // One correctly rounded float operation at a time on both sides: the same bits.
    for (size_t i = 0; i < ps.size(); ++i) {
      const int64_t n = ps[i]->numel();
      EXPECT_TRUE(same_bits(download(dev.value[i].data(), n), ps[i]->values())) << "param " << i;
      EXPECT_TRUE(same_bits(download(dev.m[i].data(), n), cpu.first_moment(i))) << "m " << i;
      EXPECT_TRUE(same_bits(download(dev.v[i].data(), n), cpu.second_moment(i))) << "v " << i;
    }
    const Vec got_amax = cuda::to_host(amaxes.data(), 2);
    const std::vector<unsigned long long> got_counts = cuda::to_host(counts.data(), 4);
    for (size_t k = 0; k < 2; ++k) {
      const Parameter& p = *ps[requants[k].index];
      std::vector<uint8_t> want(p.value.size());
      const CastStats s =
          quantize(want.data(), p.value.data(), p.numel(), requants[k].scale, requants[k].format);
      // The same encoder on the same float products: the same codes and statistics.
      EXPECT_EQ(cuda::to_host(codes[k].data(), want.size()), want) << "codes " << k;
      EXPECT_EQ(got_amax[k], s.amax) << k;
      EXPECT_EQ(got_counts[2 * k], static_cast<unsigned long long>(s.saturated)) << k;
      EXPECT_EQ(got_counts[2 * k + 1], static_cast<unsigned long long>(s.flushed)) << k;
      EXPECT_GT(s.saturated, 0) << "the scales are chosen to saturate some values";
    }
  }
}

TEST(CudaOptimizer, RequantEncodesSpecialsLikeQuantize) {
  FP8LM_REQUIRE_CUDA();
  // Zero gradients, no decay: each finite weight stays as it is (w - lr * (0 + 0 * w)), so
  // the encoder sees the specials of random_with_specials (FP8 maxima and midpoints past them,
  // subnormal boundaries, ±0) at scale 1; ±Inf weights become NaN (Inf * 0).
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    SCOPED_TRACE(fp8_format_name(f));
    Parameter p("w", {70001}, false);
    p.set_values(test::random_with_specials(70001, 7));
    Mirror dev({&p}, 0.0f);
    DeviceBuffer<uint8_t> codes(70001);
    DeviceBuffer<float> scale_amax(2);
    DeviceBuffer<unsigned long long> counts(2);
    const Vec init = {1.0f, 0.0f};
    cuda::upload(scale_amax.data(), init.data(), 2);
    counts.zero();
    cuda::AdamWTensor& t = dev.table[0];
    t.requant.data = codes.data();
    t.requant.scale = scale_amax.data();
    t.requant.amax = scale_amax.data() + 1;
    t.requant.format = f;
    t.requant.saturated = counts.data();
    t.requant.flushed = counts.data() + 1;
    dev.upload_table();
    dev.grad[0].zero();
    cuda::AdamWHyper h;
    h.lr = 1e-3f;
    cuda::adamw_step(dev.d_table.data(), 1, dev.total, h, nullptr, nullptr);

    // The device's own weights (its NaNs have other bits than the CPU's), quantized on the CPU.
    const Vec w = download(dev.value[0].data(), 70001);
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::isfinite(p.value.host()[i])) {
        ASSERT_EQ(w[i], p.value.host()[i]) << i;
      }
    }
    std::vector<uint8_t> want(w.size());
    const CastStats s = quantize(want.data(), w.data(), 70001, 1.0f, f);
    EXPECT_EQ(cuda::to_host(codes.data(), want.size()), want);
    EXPECT_EQ(cuda::to_host(scale_amax.data() + 1, 1)[0], s.amax);
    const std::vector<unsigned long long> got_counts = cuda::to_host(counts.data(), 2);
    EXPECT_EQ(got_counts[0], static_cast<unsigned long long>(s.saturated));
    EXPECT_EQ(got_counts[1], static_cast<unsigned long long>(s.flushed));
    EXPECT_GT(s.saturated, 0);
    EXPECT_GT(s.flushed, 0);
  }
}

}  // namespace
}  // namespace fp8lm
