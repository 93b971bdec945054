#include "nn/layernorm_mlp.h"

#include "kernels/cpu/activations.h"
#include "nn/fusion.h"
#include "nn/layernorm_linear.h"
#include "nn/scratch.h"

namespace fp8lm {

LayerNormMLP::LayerNormMLP(const std::string& prefix, int64_t d, int64_t ffn, Activation act,
                           Normalization norm)
    : act_(act),
      ffn_(ffn),
      norm_(prefix + ".ln2", d, norm),
      fc1_(prefix + ".fc1", d, act == Activation::Swiglu ? 2 * ffn : ffn, /*bias=*/true),
      fc2_(prefix + ".fc2", ffn, d, /*bias=*/true) {}

ParameterList LayerNormMLP::parameters() {
  ParameterList p = norm_.parameters();
  for (Parameter* q : fc1_.parameters()) p.push_back(q);
  for (Parameter* q : fc2_.parameters()) p.push_back(q);
  return p;
}

void LayerNormMLP::forward(const float* x, float* y, int64_t rows) {
  forward_impl(x, nullptr, nullptr, y, rows);
}

void LayerNormMLP::forward_residual(const float* x, const float* r, float* s, float* y,
                                    int64_t rows) {
  forward_impl(x, r, s, y, rows);
}

void LayerNormMLP::forward_impl(const float* x, const float* r, float* sum, float* y,
                                int64_t rows) {
  float* h = h_.begin(rows * fc1_.out_features(),
                      training_forward() && current_gemm_mode() != GemmMode::Fp32);
  const bool fused = fusion_enabled();
  // Fused: fc1's bias is added by the activation kernel below.
  norm_then_linear(norm_, fc1_, normed_, x, h, rows, /*add_bias=*/!fused, r, sum);
  const float* bias = fc1_.bias()->data();
  const int64_t h_cols = fc1_.out_features();
  if (fused_fp8_casts()) {
    const Linear::Fp8Input in = fc2_.begin_fp8_forward(rows);
    ScalingState& s = in.slot;
    uint8_t* qa = in.codes;
    CastStats stats;
    switch (act_) {
      case Activation::Gelu:
        stats = cpu::bias_gelu_forward_fp8(qa, s.scale, s.format, h, bias, rows, ffn_);
        break;
      case Activation::Relu:
        stats = cpu::bias_relu_forward_fp8(qa, s.scale, s.format, h, bias, rows, ffn_);
        break;
      case Activation::Swiglu:
        stats = cpu::bias_swiglu_forward_fp8(qa, s.scale, s.format, h, bias, rows, ffn_);
        break;
    }
    s.record_cast(stats, rows * ffn_);
    count_traffic(rows * h_cols * 8 + rows * ffn_);  // h in and out (with bias), codes out
    h_.save();
    fc2_.forward_fp8_input(s.scale_inv, y, rows);
    return;
  }
  float* a;
  if (current_gemm_mode() == GemmMode::Fp32) {
    a_.resize(static_cast<size_t>(rows * ffn_));
    a = a_.data();
  } else {
    a = scratch<float>(Scratch::ActOut, rows * ffn_);
  }
  if (!fused) {
    switch (act_) {
      case Activation::Gelu:
        cpu::gelu_forward(a, h, rows * ffn_);
        break;
      case Activation::Relu:
        cpu::relu_forward(a, h, rows * ffn_);
        break;
      case Activation::Swiglu:
        cpu::swiglu_forward(a, h, rows, ffn_);
        break;
    }
    count_traffic(rows * h_cols * 4 + rows * ffn_ * 4);
    h_.save();
    fc2_.forward(a, y, rows);
    return;
  }
  count_traffic(rows * h_cols * 8 + rows * ffn_ * 4);
  switch (act_) {
    case Activation::Gelu:
      cpu::bias_gelu_forward(a, h, bias, rows, ffn_);
      break;
    case Activation::Relu:
      cpu::bias_relu_forward(a, h, bias, rows, ffn_);
      break;
    case Activation::Swiglu:
      cpu::bias_swiglu_forward(a, h, bias, rows, ffn_);
      break;
  }
  h_.save();
  fc2_.forward(a, y, rows);
}

void LayerNormMLP::backward(const float* dy, float* dx, int64_t rows) {
  float* da = scratch<float>(Scratch::MlpDAct, rows * ffn_);
  float* dh = scratch<float>(Scratch::MlpDPre, rows * fc1_.out_features());
  fc2_.backward(dy, da, rows, /*accumulate_dx=*/false);
  const float* h = h_.values();
  switch (act_) {
    case Activation::Gelu:
      cpu::gelu_backward(dh, da, h, rows * ffn_);
      break;
    case Activation::Relu:
      cpu::relu_backward(dh, da, h, rows * ffn_);
      break;
    case Activation::Swiglu:
      cpu::swiglu_backward(dh, da, h, rows, ffn_);
      break;
  }
  count_traffic(rows * (ffn_ + 2 * fc1_.out_features()) * 4);
  float* dnormed = scratch<float>(Scratch::NormDOut, rows * fc1_.in_features());
  fc1_.backward(dh, dnormed, rows, /*accumulate_dx=*/false);
  norm_.backward(dnormed, dx, rows);
}

}  // namespace fp8lm
