// Module backward passes against central finite differences, in FP32 GEMM mode. The modules
// compute in float, so the loss L = sum(y * w) is accumulated in double and the step h = 5e-3
// balances truncation error (~h^2 * |f'''| ~ 1e-4) against rounding (~1e-6 / 2h ~ 1e-4);
// the tolerance (1e-3 absolute + 2% relative) sits above both and far below a wrong gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "test_util.h"

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
                    double atol = 1e-3, double rtol = 2e-2) {
  ASSERT_EQ(values.size(), grad.size()) << what;
  std::mt19937 rng(static_cast<uint32_t>(values.size()));
  const size_t samples = std::min<size_t>(24, values.size());
  for (size_t s = 0; s < samples; ++s) {
    const size_t i = values.size() <= 24 ? s : rng() % values.size();
    const float saved = values[i];
    const float h = 5e-3f;
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
  for (Activation act : {Activation::Gelu, Activation::Relu, Activation::Swiglu}) {
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
  MultiheadAttention m("layers.0", 8, 2, Normalization::LayerNorm);
  m.qkv().linear().weight().set_values(randn(192, 8, 0.4f));
  m.proj().weight().set_values(randn(64, 9, 0.4f));
  check_module<MultiheadAttention>(
      "mha", m, 2 * 5, 8, 8,
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
        // TransformerLayer::backward overwrites dx; the harness expects +=, and dx starts at 0.
        mm.backward(dy, dx);
      });
}

TEST(GPTBackward, LossGradientMatchesFiniteDifferences) {
  const GPTConfig cfg{.vocab = 11,
                      .seq_len = 6,
                      .d_model = 8,
                      .n_layers = 2,
                      .n_heads = 2,
                      .ffn = 12,
                      .activation = Activation::Swiglu,
                      .normalization = Normalization::RMSNorm};
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
        2e-4, 2e-2);
  }
}

}  // namespace
}  // namespace fp8lm
