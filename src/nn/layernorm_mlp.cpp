#include "nn/layernorm_mlp.h"

#include "nn/fusion.h"
#include "nn/layernorm_linear.h"
#include "nn/scratch.h"

namespace fp8lm {

LayerNormMLP::LayerNormMLP(const std::string& prefix, int64_t d, int64_t ffn, Activation act,
                           Normalization norm, bool bias, Backend& backend)
    : be_(backend),
      act_(act),
      ffn_(ffn),
      norm_(prefix + ".ln2", d, norm, kNormEps, backend),
      fc1_(prefix + ".fc1", d, activation_input_width(act, ffn), bias, backend),
      fc2_(prefix + ".fc2", ffn, d, bias, backend) {}

ParameterList LayerNormMLP::parameters() {
  ParameterList p = norm_.parameters();
  for (Parameter* q : fc1_.parameters()) p.push_back(q);
  for (Parameter* q : fc2_.parameters()) p.push_back(q);
  return p;
}

void LayerNormMLP::forward(const float* x, float* y, int64_t rows, const float* r, float* sum) {
  float* h = h_.begin(rows * fc1_.out_features(),
                      training_forward() && current_gemm_precision() != Precision::Fp32);
  const bool fused = fusion_enabled();
  // Fused: fc1's bias is added by the activation kernel below.
  norm_then_linear(norm_, fc1_, normed_, x, h, rows, /*add_bias=*/!fused, r, sum);
  const float* bias = fc1_.bias() ? fc1_.bias()->data() : nullptr;
  if (fused_fp8_casts(fc2_)) {
    be_.bias_act_forward(ProducerOut::fp8(fc2_.begin_fp8_forward(rows)), h, bias, act_, rows, ffn_);
    h_.save();
    fc2_.forward_fp8_input(y, rows);
    return;
  }
  if (fused_block_casts(fc2_)) {
    be_.bias_act_forward(fc2_.begin_block_forward(rows), h, bias, act_, rows, ffn_);
    h_.save();
    fc2_.forward_block_input(y, rows);
    return;
  }
  if (fused_bf16_casts(fc2_)) {
    be_.bias_act_forward(ProducerOut::bf16(fc2_.begin_bf16_forward(rows)), h, bias, act_, rows,
                         ffn_);
    h_.save();
    fc2_.forward_bf16_input(y, rows);
    return;
  }
  float* a;
  if (current_gemm_precision() == Precision::Fp32) {
    a_.resize(static_cast<size_t>(rows * ffn_));
    a = a_.data();
  } else {
    a = scratch<float>(be_, Scratch::ActOut, rows * ffn_);
  }
  be_.bias_act_forward(ProducerOut::fp32(a), h, fused ? bias : nullptr, act_, rows, ffn_);
  h_.save();
  fc2_.forward(a, y, rows);
}

void LayerNormMLP::backward(const float* dy, float* dx, int64_t rows) {
  float* da = scratch<float>(be_, Scratch::MlpDAct, rows * ffn_);
  float* dh = scratch<float>(be_, Scratch::MlpDPre, rows * fc1_.out_features());
  fc2_.backward(dy, da, rows, /*accumulate_dx=*/false);
  if (const bf16_t* h16 = h_.bf16_copy()) {
    be_.act_backward_bf16(dh, da, h16, h_.widening_room(), act_, rows, ffn_);
  } else {
    be_.act_backward(dh, da, h_.values(), act_, rows, ffn_);
  }
  float* dnormed = scratch<float>(be_, Scratch::NormDOut, rows * fc1_.in_features());
  fc1_.backward(dh, dnormed, rows, /*accumulate_dx=*/false);
  norm_.backward(dnormed, dx, rows);
}

}  // namespace fp8lm
