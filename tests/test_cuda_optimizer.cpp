// The device optimizer against train/adamw.h: the global gradient norm and clip factor, and
// AdamW over several tensors of awkward sizes (one launch for all), with the BF16 copies of the
// new weights it writes where a tensor has one (AdamWTensor::param16).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/device_query.h"
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
  std::vector<DeviceBuffer<bf16_t>> value16;  // empty but where the parameter's copy is current
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
      value16.emplace_back(p->bf16_value_current() ? n : 0);
      if (p->bf16_value_current()) t.param16 = value16.back().data();
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
  DeviceBuffer<uint8_t> scratch(cuda::grad_norm_scratch_bytes(dev.total));
  const float max_norms[] = {0.0f, 2.0f * want, want / 3.0f};
  for (float max_norm : max_norms) {
    SCOPED_TRACE(max_norm);
    cuda::grad_norm(out.data(), out.data() + 1, max_norm, dev.d_table.data(), dev.n_tensors(),
                    dev.total, scratch.data(), nullptr);
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
                  scratch.data(), nullptr);
  EXPECT_NEAR(cuda::to_host(out.data(), 1)[0], want, 0x1p-23 * want);
}

TEST(CudaOptimizer, AdamWMatchesCpuBitsOverThreeSteps) {
  FP8LM_REQUIRE_CUDA();
  auto owned = make_params(2);
  const ParameterList ps = list_of(owned);
  // Two tensors with a BF16 copy kept (as a BF16 GEMM keeps its weight's), which the CPU's
  // fused AdamW writes in its pass.
  const auto keeps_copy = [](size_t i) { return i == 1 || i == 3; };
  for (size_t i = 0; i < ps.size(); ++i)
    if (keeps_copy(i)) ps[i]->bf16_value();
  const AdamWConfig cfg;  // beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
  AdamW cpu(ps, cfg);
  Mirror dev(ps, cfg.weight_decay);

  const float lrs[] = {1e-3f, 3e-3f, 6e-4f};
  const float grad_scales[] = {0.7f, 1.3f, 0.25f};
  DeviceBuffer<float> d_grad_scale(1);
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    const float lr = lrs[step - 1], gs = grad_scales[step - 1];
    fill_grads(ps, 200 + 10 * static_cast<uint32_t>(step));
    dev.upload_grads(ps);
    cuda::upload(d_grad_scale.data(), &gs, 1);

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
                     /*decision=*/nullptr, nullptr);

    // One correctly rounded float operation at a time on both sides: the same bits.
    for (size_t i = 0; i < ps.size(); ++i) {
      const int64_t n = ps[i]->numel();
      EXPECT_TRUE(same_bits(download(dev.value[i].data(), n), ps[i]->values())) << "param " << i;
      EXPECT_TRUE(same_bits(download(dev.m[i].data(), n), cpu.first_moment(i))) << "m " << i;
      EXPECT_TRUE(same_bits(download(dev.v[i].data(), n), cpu.second_moment(i))) << "v " << i;
      if (keeps_copy(i)) {
        ASSERT_TRUE(ps[i]->bf16_value_current()) << "param " << i;
        EXPECT_EQ(to_host(dev.value16[i].data(), static_cast<size_t>(n)), ps[i]->value16.to_host())
            << "BF16 copy " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
