#include "nn/layernorm_mlp.h"

#include "kernels/cpu/activations.h"
#include "nn/fusion.h"
#include "nn/layernorm_linear.h"
#include "nn/scratch.h"

namespace fp8lm {
namespace {

// y = act(h): the unfused twin, after fc1 added its bias.
void activation_forward(Activation act, float* y, const float* h, int64_t rows, int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return cpu::gelu_forward(y, h, rows * F);
    case Activation::Relu:
      return cpu::relu_forward(y, h, rows * F);
    case Activation::Swiglu:
      return cpu::swiglu_forward(y, h, rows, F);
  }
}

// h += bias, y = act(h) in one pass.
void bias_activation_forward(Activation act, float* y, float* h, const float* bias, int64_t rows,
                             int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return cpu::bias_gelu_forward(y, h, bias, rows, F);
    case Activation::Relu:
      return cpu::bias_relu_forward(y, h, bias, rows, F);
    case Activation::Swiglu:
      return cpu::bias_swiglu_forward(y, h, bias, rows, F);
  }
}

// h += bias, y = FP8 codes of act(h) * scale in one pass.
CastStats bias_activation_forward_fp8(Activation act, uint8_t* y, float scale, Fp8Format f,
                                      float* h, const float* bias, int64_t rows, int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return cpu::bias_gelu_forward_fp8(y, scale, f, h, bias, rows, F);
    case Activation::Relu:
      return cpu::bias_relu_forward_fp8(y, scale, f, h, bias, rows, F);
    case Activation::Swiglu:
      break;
  }
  return cpu::bias_swiglu_forward_fp8(y, scale, f, h, bias, rows, F);
}

void activation_backward(Activation act, float* dh, const float* da, const float* h, int64_t rows,
                         int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return cpu::gelu_backward(dh, da, h, rows * F);
    case Activation::Relu:
      return cpu::relu_backward(dh, da, h, rows * F);
    case Activation::Swiglu:
      return cpu::swiglu_backward(dh, da, h, rows, F);
  }
}

}  // namespace

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
    ScalingState& slot = in.slot;
    slot.record_cast(
        bias_activation_forward_fp8(act_, in.codes, slot.scale, slot.format, h, bias, rows, ffn_),
        rows * ffn_);
    count_traffic(rows * h_cols * 8 + rows * ffn_);  // h in and out (with bias), codes out
    h_.save();
    fc2_.forward_fp8_input(slot.scale_inv, y, rows);
    return;
  }
  float* a;
  if (current_gemm_mode() == GemmMode::Fp32) {
    a_.resize(static_cast<size_t>(rows * ffn_));
    a = a_.data();
  } else {
    a = scratch<float>(Scratch::ActOut, rows * ffn_);
  }
  if (fused) {
    bias_activation_forward(act_, a, h, bias, rows, ffn_);
    count_traffic(rows * h_cols * 8 + rows * ffn_ * 4);
  } else {
    activation_forward(act_, a, h, rows, ffn_);
    count_traffic(rows * h_cols * 4 + rows * ffn_ * 4);
  }
  h_.save();
  fc2_.forward(a, y, rows);
}

void LayerNormMLP::backward(const float* dy, float* dx, int64_t rows) {
  float* da = scratch<float>(Scratch::MlpDAct, rows * ffn_);
  float* dh = scratch<float>(Scratch::MlpDPre, rows * fc1_.out_features());
  fc2_.backward(dy, da, rows, /*accumulate_dx=*/false);
  activation_backward(act_, dh, da, h_.values(), rows, ffn_);
  count_traffic(rows * (ffn_ + 2 * fc1_.out_features()) * 4);
  float* dnormed = scratch<float>(Scratch::NormDOut, rows * fc1_.in_features());
  fc1_.backward(dh, dnormed, rows, /*accumulate_dx=*/false);
  norm_.backward(dnormed, dx, rows);
}

}  // namespace fp8lm
