// An FP8 Linear against docs/reference/numerics.md: its output is the double-precision product
// of the decoded FP8 operands times both scale_invs (to FP32-accumulation tolerance), and its
// scaling state after scripted steps is the hand-computed one. Plus: the fused LayerNorm->FP8
// path gives the same bits as the unfused one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"

#include "kernels/cpu/gemm.h"
#include "nn/fusion.h"
#include "nn/layernorm_linear.h"
#include "nn/micro_batch.h"
#include "nn/saved_activation.h"
#include "train/adamw.h"

namespace fp8lm {
namespace {

using test::randn;

Fp8Recipe delayed(Format f, int len) {
  Fp8Recipe r;
  r.delayed.format = f;
  r.delayed.amax_history_len = len;
  return r;
}

TEST(Fp8Linear, OutputIsTheProductOfDecodedOperands) {
  const int64_t rows = 9, in = 33, out = 17;
  Linear lin("fc", in, out, true);
  lin.weight().set_values(randn(static_cast<size_t>(in * out), 1, 0.3f));
  lin.bias()->set_values(randn(static_cast<size_t>(out), 2));
  const auto x = randn(static_cast<size_t>(rows * in), 3);
  const Fp8Recipe recipe = delayed(Format::Hybrid, 4);
  Fp8Meta meta(recipe.delayed);  // as the first FP8 forward would build it
  meta[Slot::Input].set_scale(64.0f);
  meta[Slot::Weight].set_scale(256.0f);
  lin.set_fp8_meta(meta);
  std::vector<float> y(static_cast<size_t>(rows * out));
  {
    const Autocast fp8(true, recipe);
    lin.forward(x.data(), y.data(), rows);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double a = fp8_decode(fp8_encode(x[r * in + k] * 64.0f, DType::E4M3), DType::E4M3);
        const double b = fp8_decode(
            fp8_encode(lin.weight().value.host()[o * in + k] * 256.0f, DType::E4M3), DType::E4M3);
        acc += a * b;
        mag += std::fabs(a * b);
      }
      const double want = acc / (64.0 * 256.0) + lin.bias()->value.host()[o];
      // FP32 accumulation over `in` exact products, the scale multiply and the bias add.
      const double tol = (in + 3) * 0x1p-24 * (mag / (64.0 * 256.0) + std::fabs(want));
      ASSERT_NEAR(y[r * out + o], want, tol) << r << "," << o;
    }
  }
}

TEST(Fp8Linear, ScalingStateAfterScriptedStepsIsHandComputed) {
  const int64_t rows = 2, in = 4, out = 3;
  Linear lin("fc", in, out, false);
  // Weight amax 0.5 -> weight scale 448 / 0.5 = 896 after the first update.
  lin.weight().set_values(
      {0.5f, -0.25f, 0.125f, 0.0f, 0.1f, 0.2f, -0.3f, 0.4f, 0.0f, 0.0f, 0.0f, -0.5f});
  const Fp8Recipe recipe = delayed(Format::Hybrid, 4);
  std::vector<float> y(rows * out), dx(rows * in);
  const float input_amax[] = {1.0f, 4.0f, 2.0f};
  const float grad_amax[] = {8.0f, 0.5f, 0.25f};
  for (int step = 0; step < 3; ++step) {
    std::vector<float> x(rows * in, 0.1f);
    x[3] = -input_amax[step];
    std::vector<float> dy(rows * out, 0.01f);
    dy[4] = grad_amax[step];
    {
      const Autocast fp8(true, recipe);
      lin.forward(x.data(), y.data(), rows);
    }
    lin.backward(dy.data(), dx.data(), rows);
    lin.scaling().update(Direction::Backward, recipe.delayed);
  }
  const Fp8Meta m = lin.fp8_meta();
  // Input: windows {1}, {1,4}, {1,4,2} -> max 4 after the third update: 448 / 4.
  EXPECT_EQ(m[Slot::Input].amax_history, (std::vector<float>{0, 1, 4, 2}));
  EXPECT_EQ(m[Slot::Input].scale, 112.0f);
  EXPECT_EQ(m[Slot::Input].scale_inv, 1.0f / 112.0f);
  // The weight did not change, but its scale did after step 1, so it was cast again at step 2
  // (amax 0.5 recorded twice) and reused at step 3 (no amax: not rolled).
  EXPECT_EQ(m[Slot::Weight].amax_history, (std::vector<float>{0, 0, 0.5f, 0.5f}));
  EXPECT_EQ(m[Slot::Weight].scale, 896.0f);
  // grad_output is E5M2 under HYBRID: 57344 / max(8, 0.5, 0.25).
  EXPECT_EQ(m[Slot::GradOutput].format, DType::E5M2);
  EXPECT_EQ(m[Slot::GradOutput].amax_history, (std::vector<float>{0, 8, 0.5f, 0.25f}));
  EXPECT_EQ(m[Slot::GradOutput].scale, 7168.0f);
  EXPECT_EQ(m[Slot::Output].amax_history, (std::vector<float>{0, 0, 0, 0}));  // unused slot
}

TEST(Fp8Linear, FusedLayerNormCastEqualsNormThenCast) {
  const int64_t rows = 5, in = 24, out = 8;
  LayerNormLinear fused("ln1", "qkv", in, out, Normalization::LayerNorm, true);
  Norm norm("ln1", in, Normalization::LayerNorm);
  Linear plain("qkv", in, out, true);
  const auto w = randn(static_cast<size_t>(in * out), 4, 0.2f);
  fused.linear().weight().set_values(w);
  plain.weight().set_values(w);
  const auto x = randn(static_cast<size_t>(rows * in), 5);
  std::vector<float> y1(rows * out), y2(rows * out), normed(rows * in);
  const Fp8Recipe recipe = delayed(Format::E4M3, 8);
  for (int step = 0; step < 3; ++step) {  // later steps use scales learned from amaxes
    const Autocast fp8(true, recipe);
    fused.forward(x.data(), y1.data(), rows);
    norm.forward(x.data(), normed.data(), rows);
    plain.forward(normed.data(), y2.data(), rows);
  }
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(fused.linear().fp8_meta()[Slot::Input].amax_history,
            plain.fp8_meta()[Slot::Input].amax_history);
  EXPECT_NE(fused.linear().fp8_meta()[Slot::Input].scale, 1.0f);
}

// The CPU's FP8 GEMMs multiply the codes' values as BF16 (Backend::fp8_gemms_take_decoded):
// every cast of a CPU Linear writes them beside its codes, so a training step's GEMMs (the
// norm's fused cast under delayed scaling, the Linear's own under current scaling; one
// micro-batch or several; then a forward outside training) decode no code themselves.
TEST(Fp8Linear, CpuGemmsTakeTheValuesTheCastsDecoded) {
  const int64_t rows = 6, in = 32, out = 16;
  for (const ScalingKind kind : {ScalingKind::Delayed, ScalingKind::Current}) {
    for (const MicroBatch micro : {MicroBatch::Only, MicroBatch::First}) {
      SCOPED_TRACE(::testing::Message() << "current scaling " << (kind == ScalingKind::Current)
                                        << ", micro-batches " << (micro == MicroBatch::First));
      LayerNormLinear layer("ln1", "qkv", in, out, Normalization::LayerNorm, true);
      layer.linear().weight().set_values(randn(static_cast<size_t>(in * out), 6, 0.2f));
      const auto x = randn(static_cast<size_t>(rows * in), 7);
      const auto dy = randn(static_cast<size_t>(rows * out), 8);
      std::vector<float> y(rows * out), dx(rows * in);
      Fp8Recipe recipe = delayed(Format::Hybrid, 4);
      recipe.kind = kind;
      cpu::reset_gemm_stats();
      {
        const Autocast fp8(true, recipe);
        const TrainingForward training(true);
        const MicroBatchScope micro_batch(micro);
        layer.forward(x.data(), y.data(), rows);
      }
      layer.backward(dy.data(), dx.data(), rows);
      {
        const Autocast fp8(true, recipe);
        layer.forward(x.data(), y.data(), rows);
      }
      EXPECT_EQ(cpu::gemm_stats().flops, 8.0 * rows * in * out) << "four GEMMs ran";
      EXPECT_EQ(cpu::gemm_stats().fp8_values_decoded, 0);
    }
  }
}

// Under BF16 GEMMs a Linear keeps its weight's BF16 cast while the weight's version holds: a
// weight set anew (the optimizer's update bumps the version the same way) is cast again, so the
// output is a fresh Linear's with the new weight, not the old cast's.
TEST(Bf16Linear, WeightCastIsRedoneWhenTheWeightChanges) {
  const int64_t rows = 5, in = 24, out = 7;
  const auto x = randn(static_cast<size_t>(rows * in), 1);
  const auto w1 = randn(static_cast<size_t>(in * out), 2),
             w2 = randn(static_cast<size_t>(in * out), 3);
  const GemmPrecision bf16(Precision::Bf16);
  const auto forward = [&](Linear& lin) {
    std::vector<float> y(static_cast<size_t>(rows * out));
    lin.forward(x.data(), y.data(), rows);
    return y;
  };
  Linear kept("fc", in, out, false);
  kept.weight().set_values(w1);
  const auto y1 = forward(kept);
  EXPECT_EQ(forward(kept), y1);  // the kept cast serves again
  kept.weight().set_values(w2);
  Linear fresh("fc", in, out, false);
  fresh.weight().set_values(w2);
  const auto y2 = forward(kept);
  EXPECT_EQ(y2, forward(fresh));
  EXPECT_NE(y2, y1);
}

// AdamW writes a BF16 weight cast a Linear keeps in the pass that updates the weight, so the
// cast stays current (bf16_from_float of every new value) and the next forward gives a fresh
// Linear's output without casting; a skipped step leaves both as they were. Unfused
// (--no-fusion) the optimizer leaves the cast stale, for the Linear to make again.
TEST(Bf16Linear, TheOptimizerWritesTheKeptWeightCastInItsPass) {
  const int64_t rows = 5, in = 40, out = 9;
  const auto x = randn(static_cast<size_t>(rows * in), 1);
  const GemmPrecision bf16(Precision::Bf16);
  const auto forward = [&](Linear& lin) {
    std::vector<float> y(static_cast<size_t>(rows * out));
    lin.forward(x.data(), y.data(), rows);
    return y;
  };
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    const FusionScope fusion(fused);
    Linear lin("fc", in, out, true);
    Parameter& w = lin.weight();
    w.set_values(randn(static_cast<size_t>(in * out), 2));
    forward(lin);  // makes the kept cast
    ASSERT_TRUE(w.bf16_value_current());
    w.grad.upload(randn(static_cast<size_t>(in * out), 3), "gradient");
    AdamW opt({&w, lin.bias()}, AdamWConfig{});
    opt.step(1e-2f);
    EXPECT_EQ(w.bf16_value_current(), fused);
    EXPECT_EQ(lin.bias()->value16.size(), 0u) << "a bias no GEMM takes gets no copy";
    if (fused) {
      const std::vector<float> v = w.values();
      const std::vector<bf16_t> v16 = w.value16.to_host();
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_EQ(v16[i], bf16_from_float(v[i])) << "value " << i;
    }
    Linear fresh("fc", in, out, true);
    fresh.weight().set_values(w.values());
    EXPECT_EQ(forward(lin), forward(fresh));

    // A step decided on the backend that skips (a NaN loss) changes neither.
    const std::vector<float> before = w.values();
    const std::vector<bf16_t> before16 = w.value16.to_host();
    const float nan_loss = std::nanf("");
    opt.step_decided_on_backend(1e-2f, 0.0f, &nan_loss, 1);
    EXPECT_EQ(w.values(), before);
    EXPECT_EQ(w.bf16_value_current(), fused);
    if (fused) {
      EXPECT_EQ(w.value16.to_host(), before16);
    }
  }
}

}  // namespace
}  // namespace fp8lm
