// Producers that cast block-scaled as they make their output (issue 35: the casts fused with
// the producer that writes the operand): the CPU backend's norm_forward and bias_act_forward
// with a block-scaled ProducerOut give the bits of their FP32 output cast afterwards
// (block_cast_pair, or block_cast in a forward outside training), and the modules that use them
// (LayerNormLinear, LayerNormMLP) train to the bits of their unfused twins.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "fp8/block_cast.h"
#include "kernels/backend.h"
#include "nn/autocast.h"
#include "nn/fusion.h"
#include "nn/layernorm_linear.h"
#include "nn/layernorm_mlp.h"
#include "nn/saved_activation.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using test::randn;

// One cast's outputs, compared whole.
struct Cast {
  std::vector<uint8_t> scales;
  std::vector<bf16_t> operand;
  float tensor_scale_inv = 0;
  explicit Cast(int64_t n) : scales(static_cast<size_t>(n) * sizeof(float)), operand(n) {}
  BlockCastOut out() { return {nullptr, scales.data(), operand.data(), &tensor_scale_inv}; }
  bool operator==(const Cast&) const = default;
};

// The casts a block-scaled Linear makes of its [rows, cols] input: row-wise, and column-wise
// where `pair`.
struct InputCasts {
  BlockCast row, col;
  Cast row_out, col_out;
  BlockCastOut row_desc, col_desc;
  bool pair;
  InputCasts(ScalingKind kind, int64_t rows, int64_t cols, bool both)
      : row_out(rows * cols), col_out(rows * cols), pair(both) {
    Fp8Recipe r;
    r.kind = kind;
    row = recipe_block_cast(r, BlockRole::Input, false, rows, cols);
    col = recipe_block_cast(r, BlockRole::Input, true, rows, cols);
    row_desc = row_out.out();
    col_desc = col_out.out();
  }
  ProducerOut producer_out() {
    return ProducerOut::block_scaled(
        {&row, &row_desc, pair ? &col : nullptr, pair ? &col_desc : nullptr});
  }
  void cast(const std::vector<float>& y) {
    if (pair) return block_cast_pair(row, row_desc, col, col_desc, y.data(), nullptr);
    block_cast(row, row_desc, y.data(), nullptr);
  }
};

const ScalingKind kKinds[] = {ScalingKind::Block, ScalingKind::Mxfp8};

TEST(BlockProducers, NormCastsItsOutputAsThatOutputCastAfterwards) {
  Backend& be = cpu_backend();
  const int64_t rows = 150, C = 96;  // several stripes of 32 and a short one of 128
  const auto x = randn(static_cast<size_t>(rows * C), 1), r = randn(x.size(), 2, 0.5f);
  const auto gamma = randn(C, 3, 0.3f), beta = randn(C, 4, 0.3f);
  omp_set_num_threads(2);
  for (const Normalization kind : {Normalization::LayerNorm, Normalization::RMSNorm}) {
    for (const bool residual : {false, true}) {
      for (const ScalingKind recipe : kKinds) {
        for (const bool pair : {true, false}) {
          SCOPED_TRACE(std::string(scaling_kind_name(recipe)) + (residual ? " residual" : "") +
                       (pair ? " pair" : " row-wise") +
                       (kind == Normalization::LayerNorm ? " LayerNorm" : " RMSNorm"));
          const NormParams p{kind, gamma.data(), beta.data(), C, 1e-5f};
          std::vector<float> y(x.size()), s(x.size()), mean(rows), rstd(rows);
          be.norm_forward(p, {mean.data(), rstd.data()}, ProducerOut::fp32(y.data()),
                          residual ? s.data() : nullptr, x.data(), residual ? r.data() : nullptr,
                          rows);
          InputCasts want(recipe, rows, C, pair), got(recipe, rows, C, pair);
          want.cast(y);
          std::vector<float> s2(x.size()), mean2(rows), rstd2(rows);
          be.norm_forward(p, {mean2.data(), rstd2.data()}, got.producer_out(),
                          residual ? s2.data() : nullptr, x.data(), residual ? r.data() : nullptr,
                          rows);
          EXPECT_TRUE(got.row_out == want.row_out);
          EXPECT_TRUE(got.col_out == want.col_out);
          EXPECT_EQ(s2, s);
          EXPECT_EQ(mean2, mean);
          EXPECT_EQ(rstd2, rstd);
        }
      }
    }
  }
}

TEST(BlockProducers, ActivationCastsItsOutputAsThatOutputCastAfterwards) {
  Backend& be = cpu_backend();
  const int64_t rows = 70, F = 160;
  omp_set_num_threads(2);
  for (std::string_view name : activation_names()) {
    const Activation act = parse_activation(name);
    const int64_t in = activation_input_width(act, F);
    const auto h0 = randn(static_cast<size_t>(rows * in), 5, 2.0f), bias = randn(in, 6);
    for (const ScalingKind recipe : kKinds) {
      SCOPED_TRACE(std::string(scaling_kind_name(recipe)) + " " + std::string(name));
      std::vector<float> y(static_cast<size_t>(rows * F)), h = h0, h2 = h0;
      be.bias_act_forward(ProducerOut::fp32(y.data()), h.data(), bias.data(), act, rows, F);
      InputCasts want(recipe, rows, F, true), got(recipe, rows, F, true);
      want.cast(y);
      be.bias_act_forward(got.producer_out(), h2.data(), bias.data(), act, rows, F);
      EXPECT_TRUE(got.row_out == want.row_out);
      EXPECT_TRUE(got.col_out == want.col_out);
      EXPECT_EQ(h2, h);  // the bias added in place, as the FP32 producer does
    }
  }
}

TEST(BlockProducers, ACastOfAnotherShapeOrOfNvfp4IsRefused) {
  Backend& be = cpu_backend();
  const int64_t rows = 32, F = 64;
  std::vector<float> h(static_cast<size_t>(rows * F), 1.0f);
  InputCasts wrong(ScalingKind::Mxfp8, rows, 2 * F, true);
  EXPECT_THROW(
      be.bias_act_forward(wrong.producer_out(), h.data(), nullptr, Activation::Gelu, rows, F),
      Error);
  InputCasts nvfp4(ScalingKind::Nvfp4, rows, F, false);
  EXPECT_THROW(
      be.bias_act_forward(nvfp4.producer_out(), h.data(), nullptr, Activation::Gelu, rows, F),
      Error);
}

// A module's training step (forward, backward) and a forward outside training: its outputs,
// input gradient and parameter gradients.
template <class Module>
std::vector<std::vector<float>> step(Module& m, const std::vector<float>& x,
                                     const std::vector<float>& dy, int64_t rows, int64_t out) {
  std::vector<float> y(static_cast<size_t>(rows * out)), y_eval(y.size()), dx(x.size(), 0.0f);
  for (Parameter* p : m.parameters()) p->grad.zero();
  {
    const TrainingForward training(true);
    m.forward(x.data(), y.data(), rows);
  }
  m.backward(dy.data(), dx.data(), rows);
  m.forward(x.data(), y_eval.data(), rows);
  std::vector<std::vector<float>> all{y, dx, y_eval};
  for (Parameter* p : m.parameters()) all.push_back(p->grad.to_host());
  return all;
}

TEST(BlockProducers, ModulesTrainToTheBitsOfTheirUnfusedCasts) {
  const int64_t rows = 96, d = 64, ffn = 160;
  const auto x = randn(static_cast<size_t>(rows * d), 7), dy_qkv = randn(rows * 3 * d, 8),
             dy = randn(static_cast<size_t>(rows * d), 9);
  for (const ScalingKind kind : kKinds) {
    SCOPED_TRACE(scaling_kind_name(kind));
    Fp8Recipe recipe;
    recipe.kind = kind;
    const auto run = [&](bool fused) {
      LayerNormLinear qkv("ln1", "qkv", d, 3 * d, Normalization::LayerNorm, true);
      LayerNormMLP mlp("layers.0", d, ffn, Activation::Gelu, Normalization::LayerNorm);
      qkv.linear().weight().set_values(randn(static_cast<size_t>(3 * d * d), 10, 0.2f));
      const FusionScope fusion(fused);
      const Autocast fp8(true, recipe);
      // The path under test is taken (or not): the producers cast the Linears' inputs.
      EXPECT_EQ(fused_block_casts(qkv.linear()), fused);
      auto all = step(qkv, x, dy_qkv, rows, 3 * d);
      for (auto& v : step(mlp, x, dy, rows, d)) all.push_back(std::move(v));
      return all;
    };
    const auto fused = run(true), unfused = run(false);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << "tensor " << i;
  }
}

}  // namespace
}  // namespace fp8lm
