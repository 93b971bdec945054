// Module backward passes against central finite differences, in FP32 GEMM mode. The modules
// compute in float, so the loss L = sum(y * w) is accumulated in double and the step h = 5e-3
// balances truncation error (~h^2 * |f'''| ~ 1e-4) against rounding (~1e-6 / 2h ~ 1e-4);
// the tolerance (1e-3 absolute + 2% relative) sits above both and far below a wrong gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string_view>

#include "test_util.h"

#include "kernels/types.h"
#include "nn/attention.h"
#include "nn/gpt.h"
#include "nn/layernorm_linear.h"
#include "nn/layernorm_mlp.h"

namespace fp8lm {
namespace {

using test::randn;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks grad against finite differences of loss() in the entries of `values` (a sample of
// up to 24 of them), restoring each entry afterwards.
void check_gradient(const std::string& what, std::span<float> values,
                    const std::vector<float>& grad, const std::function<double()>& loss,
                    double atol = 1e-3, double rtol = 2e-2, float h = 5e-3f) {
  ASSERT_EQ(values.size(), grad.size()) << what;
  std::mt19937 rng(static_cast<uint32_t>(values.size()));
  const size_t samples = std::min<size_t>(24, values.size());
  for (size_t s = 0; s < samples; ++s) {
    const size_t i = values.size() <= 24 ? s : rng() % values.size();
    const float saved = values[i];
    values[i] = saved + h;
    const double up = loss();
    values[i] = saved - h;
    const double down = loss();
    values[i] = saved;
    const double fd = (up - down) / (2.0 * h);
    EXPECT_NEAR(grad[i], fd, atol + rtol * std::fabs(fd)) << what << "[" << i << "]";
  }
}

// Runs forward, loss = sum(y * w), backward with dy = w; then checks dx and every parameter.
template <class Module>
void check_module(const std::string& name, Module& m, int64_t rows, int64_t in, int64_t out,
                  const std::function<void(Module&, const float*, float*)>& fwd,
                  const std::function<void(Module&, const float*, float*)>& bwd) {
  auto x = randn(static_cast<size_t>(rows * in), 11);
  const auto w = randn(static_cast<size_t>(rows * out), 12);
  std::vector<float> y(static_cast<size_t>(rows * out));
  const auto loss = [&]() {
    fwd(m, x.data(), y.data());
    return dot(y, w);
  };
  for (Parameter* p : m.parameters()) p->grad.zero();
  loss();
  std::vector<float> dx(x.size(), 0.0f);
  bwd(m, w.data(), dx.data());
  check_gradient(name + " dx", x, dx, loss);
  for (Parameter* p : m.parameters()) {
    const std::vector<float> g = p->grad.to_host();
    check_gradient(name + " " + p->name, p->value.host(), g, [&]() {
      ++p->version;  // invalidate cached casts
      return loss();
    });
  }
}

TEST(LinearBackward, MatchesFiniteDifferences) {
  Linear lin("fc", 5, 4, true);
  lin.weight().set_values(randn(20, 1, 0.5f));
  lin.bias()->set_values(randn(4, 2));
  check_module<Linear>(
      "linear", lin, 6, 5, 4, [](Linear& m, const float* x, float* y) { m.forward(x, y, 6); },
      [](Linear& m, const float* dy, float* dx) { m.backward(dy, dx, 6); });
}

TEST(NormBackward, MatchesFiniteDifferencesForLayerNormAndRMSNorm) {
  for (Normalization kind : {Normalization::LayerNorm, Normalization::RMSNorm}) {
    Norm norm("ln", 7, kind);
    norm.weight().set_values(randn(7, 3, 0.5f));
    check_module<Norm>(
        std::string(normalization_name(kind)), norm, 5, 7, 7,
        [](Norm& m, const float* x, float* y) { m.forward(x, y, 5); },
        [](Norm& m, const float* dy, float* dx) { m.backward(dy, dx, 5); });
  }
}

TEST(LayerNormLinearBackward, MatchesFiniteDifferences) {
  for (Normalization kind : {Normalization::LayerNorm, Normalization::RMSNorm}) {
    LayerNormLinear m("ln1", "qkv", 6, 9, kind, true);
    m.linear().weight().set_values(randn(54, 4, 0.5f));
    check_module<LayerNormLinear>(
        "lnlinear", m, 4, 6, 9,
        [](LayerNormLinear& mm, const float* x, float* y) { mm.forward(x, y, 4); },
        [](LayerNormLinear& mm, const float* dy, float* dx) { mm.backward(dy, dx, 4); });
  }
}

TEST(LayerNormMLPBackward, MatchesFiniteDifferencesForEveryActivationAndNorm) {
  for (std::string_view name : activation_names()) {
    const Activation act = parse_activation(name);
    for (Normalization kind : {Normalization::LayerNorm, Normalization::RMSNorm}) {
      LayerNormMLP m("layers.0", 6, 10, act, kind);
      m.fc1().weight().set_values(randn(static_cast<size_t>(m.fc1().weight().numel()), 5, 0.5f));
      m.fc1().bias()->set_values(randn(static_cast<size_t>(m.fc1().out_features()), 6, 0.3f));
      m.fc2().weight().set_values(randn(60, 7, 0.5f));
      check_module<LayerNormMLP>(
          std::string(activation_name(act)) + "/" + std::string(normalization_name(kind)), m, 4, 6,
          6, [](LayerNormMLP& mm, const float* x, float* y) { mm.forward(x, y, 4); },
          [](LayerNormMLP& mm, const float* dy, float* dx) { mm.backward(dy, dx, 4); });
    }
  }
}

TEST(MultiheadAttentionBackward, MatchesFiniteDifferences) {
  const GPTConfig cfg{.d_model = 8, .n_heads = 2};
  MultiheadAttention m("layers.0", cfg);
  m.qkv().linear().weight().set_values(randn(192, 8, 0.4f));
  m.proj().weight().set_values(randn(64, 9, 0.4f));
  check_module<MultiheadAttention>(
      "mha", m, 2 * 5, 8, 8,
      [](MultiheadAttention& mm, const float* x, float* y) { mm.forward(x, y, 2, 5); },
      [](MultiheadAttention& mm, const float* dy, float* dx) { mm.backward(dy, dx); });
}

// Llama's attention: RMSNorm, rotary embeddings (a small theta turns even the low frequencies
// noticeably over 5 positions), 4 query heads sharing 2 key/value heads, no biases.
TEST(MultiheadAttentionBackward, MatchesFiniteDifferencesWithRopeAndGroupedQueries) {
  const GPTConfig cfg{.d_model = 16,
                      .n_heads = 4,
                      .normalization = Normalization::RMSNorm,
                      .n_kv_heads = 2,
                      .rope_theta = 100,
                      .bias = false};
  MultiheadAttention m("layers.0", cfg);
  ASSERT_EQ(m.qkv().linear().out_features(), 16 + 2 * 8);
  ASSERT_EQ(m.qkv().linear().bias(), nullptr);
  m.qkv().linear().weight().set_values(randn(32 * 16, 8, 0.4f));
  m.proj().weight().set_values(randn(16 * 16, 9, 0.4f));
  check_module<MultiheadAttention>(
      "gqa+rope", m, 2 * 5, 16, 16,
      [](MultiheadAttention& mm, const float* x, float* y) { mm.forward(x, y, 2, 5); },
      [](MultiheadAttention& mm, const float* dy, float* dx) { mm.backward(dy, dx); });
}

TEST(TransformerLayerBackward, MatchesFiniteDifferences) {
  const GPTConfig cfg{
      .vocab = 11, .seq_len = 6, .d_model = 8, .n_layers = 1, .n_heads = 2, .ffn = 12};
  TransformerLayer layer(0, cfg);
  uint32_t seed = 20;
  for (Parameter* p : layer.parameters())
    if (p->decay) p->set_values(randn(p->value.size(), seed++, 0.4f));
  check_module<TransformerLayer>(
      "layer", layer, 2 * 5, 8, 8,
      [](TransformerLayer& mm, const float* x, float* y) { mm.forward(x, y, 2, 5); },
      [](TransformerLayer& mm, const float* dy, float* dx) {
        // TransformerLayer::backward turns the output's gradient into the input's in place
        // (each branch adding into the buffer it reads); the harness expects dx +=.
        std::vector<float> grad(dy, dy + 2 * 5 * 8);
        mm.backward(grad.data());
        for (size_t i = 0; i < grad.size(); ++i) dx[i] += grad[i];
      });
}

// step: the finite-difference step, smaller where the loss curves more sharply.
void check_gpt_gradients(const GPTConfig& cfg, float step = 5e-3f) {
  GPT model(cfg, 3);
  // GPT-2's 0.02 init makes the residual stream so small that the norms curve sharply within
  // the finite-difference step; O(1) weights keep the check in its linear regime.
  uint32_t seed = 40;
  for (Parameter* p : model.parameters())
    if (p->decay || p->name == "wpe") p->set_values(randn(p->value.size(), seed++, 0.5f));
  const std::vector<int32_t> tokens = {1, 4, 7, 10, 2, 5, 3, 3, 8, 0, 9, 6};
  const std::vector<int32_t> targets = {4, 7, 10, 2, 5, 8, 3, 8, 0, 9, 6, 1};
  for (Parameter* p : model.parameters()) p->grad.zero();
  model.forward(tokens.data(), targets.data(), 2, 6);
  model.backward();
  for (Parameter* p : model.parameters()) {
    const std::vector<float> g = p->grad.to_host();
    // The mean loss over 12 rows has gradients ~1e-2; tolerance scaled to match.
    check_gradient(
        p->name, p->value.host(), g,
        [&]() {
          ++p->version;
          return static_cast<double>(model.forward(tokens.data(), targets.data(), 2, 6));
        },
        2e-4, 2e-2, step);
  }
}

TEST(GPTBackward, LossGradientMatchesFiniteDifferences) {
  check_gpt_gradients({.vocab = 11,
                       .seq_len = 6,
                       .d_model = 8,
                       .n_layers = 2,
                       .n_heads = 2,
                       .ffn = 12,
                       .activation = Activation::Swiglu,
                       .normalization = Normalization::RMSNorm});
}

// Llama's blocks: rotary embeddings instead of a position table, grouped-query attention, no
// biases, and an LM head of its own.
TEST(GPTBackward, LossGradientMatchesFiniteDifferencesForLlamaBlocks) {
  const GPTConfig cfg{.vocab = 11,
                      .seq_len = 6,
                      .d_model = 8,
                      .n_layers = 2,
                      .n_heads = 4,
                      .ffn = 12,
                      .activation = Activation::Swiglu,
                      .normalization = Normalization::RMSNorm,
                      .n_kv_heads = 2,
                      .rope_theta = 100,
                      .bias = false,
                      .tied_head = false};
  GPT model(cfg, 3);
  std::vector<std::string> names;
  for (Parameter* p : model.parameters()) names.push_back(p->name);
  EXPECT_EQ(names.front(), "wte");
  EXPECT_EQ(names[1], "layers.0.ln1.weight");  // no position table
  EXPECT_EQ(names.back(), "lm_head");
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.ends_with(".bias"); }),
            0);
  EXPECT_EQ(static_cast<int64_t>(names.size()), 1 + 2 * 6 + 1 + 1);
  // The rotations and the untied head make this loss curve more: at the usual step (5e-3) the
  // truncation error reaches 3% of a gradient; at 1e-3 it falls to ~0.1%, while rounding
  // (float loss ~2, 2^-24 * 2 / 2e-3 ~ 1e-4) stays below atol.
  check_gpt_gradients(cfg, 1e-3f);
}

}  // namespace
}  // namespace fp8lm
