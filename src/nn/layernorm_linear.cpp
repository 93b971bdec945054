#include "nn/layernorm_linear.h"

#include "nn/scratch.h"

namespace fp8lm {

void norm_then_linear(Norm& norm, Linear& linear, BackendBuffer<float>& normed, const float* x,
                      float* y, int64_t rows, bool add_bias, const float* r, float* sum) {
  if (fused_fp8_casts(linear)) {
    norm.forward(ProducerOut::fp8(linear.begin_fp8_forward(rows)), x, rows, r, sum);
    linear.forward_fp8_input(y, rows, add_bias);
    return;
  }
  if (fused_block_casts(linear)) {
    norm.forward(linear.begin_block_forward(rows), x, rows, r, sum);
    linear.forward_block_input(y, rows, add_bias);
    return;
  }
  if (fused_bf16_casts(linear)) {
    norm.forward(ProducerOut::bf16(linear.begin_bf16_forward(rows)), x, rows, r, sum);
    linear.forward_bf16_input(y, rows, add_bias);
    return;
  }
  const int64_t n = rows * linear.in_features();
  float* out;
  if (current_gemm_precision() == Precision::Fp32) {
    normed.resize(static_cast<size_t>(n));
    out = normed.data();
  } else {
    out = scratch<float>(linear.backend(), Scratch::NormOut, n);
  }
  norm.forward(ProducerOut::fp32(out), x, rows, r, sum);
  linear.forward(out, y, rows, add_bias);
}

LayerNormLinear::LayerNormLinear(std::string norm_name, std::string linear_name, int64_t in,
                                 int64_t out, Normalization norm, bool bias, Backend& backend)
    : norm_(std::move(norm_name), in, norm, kNormEps, backend),
      linear_(std::move(linear_name), in, out, bias, backend) {}

ParameterList LayerNormLinear::parameters() {
  ParameterList p = norm_.parameters();
  for (Parameter* q : linear_.parameters()) p.push_back(q);
  return p;
}

void LayerNormLinear::forward(const float* x, float* y, int64_t rows) {
  norm_then_linear(norm_, linear_, normed_, x, y, rows, /*add_bias=*/true);
}

void LayerNormLinear::backward(const float* dy, float* dx, int64_t rows) {
  float* dnormed =
      scratch<float>(linear_.backend(), Scratch::NormDOut, rows * linear_.in_features());
  linear_.backward(dy, dnormed, rows, /*accumulate_dx=*/false);
  norm_.backward(dnormed, dx, rows);
}

}  // namespace fp8lm
