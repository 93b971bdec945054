#include "nn/norm.h"

#include <algorithm>

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "nn/fusion.h"

namespace fp8lm {

Norm::Norm(std::string name, int64_t C, Normalization kind, float eps)
    : kind_(kind),
      C_(C),
      eps_(eps),
      gamma_(name + ".weight", {C}, /*decays=*/false),
      beta_(name + ".bias", {kind == Normalization::LayerNorm ? C : 0}, /*decays=*/false) {
  std::fill(gamma_.value.begin(), gamma_.value.end(), 1.0f);
}

ParameterList Norm::parameters() {
  if (kind_ == Normalization::LayerNorm) return {&gamma_, &beta_};
  return {&gamma_};
}

void Norm::forward(const float* x, float* y, int64_t rows) {
  x_ = x;
  mean_.resize(static_cast<size_t>(rows));
  rstd_.resize(static_cast<size_t>(rows));
  count_traffic(rows * C_ * 8);
  if (kind_ == Normalization::LayerNorm) {
    cpu::layernorm_forward(y, mean_.data(), rstd_.data(), x, gamma_.data(), beta_.data(), rows, C_,
                           eps_);
  } else {
    cpu::rmsnorm_forward(y, rstd_.data(), x, gamma_.data(), rows, C_, eps_);
  }
}

CastStats Norm::forward_fp8(const float* x, uint8_t* y, float scale, Fp8Format f, int64_t rows) {
  x_ = x;
  mean_.resize(static_cast<size_t>(rows));
  rstd_.resize(static_cast<size_t>(rows));
  count_traffic(rows * C_ * 5);
  if (kind_ == Normalization::LayerNorm) {
    return cpu::layernorm_forward_fp8(y, scale, f, mean_.data(), rstd_.data(), x, gamma_.data(),
                                      beta_.data(), rows, C_, eps_);
  }
  return cpu::rmsnorm_forward_fp8(y, scale, f, rstd_.data(), x, gamma_.data(), rows, C_, eps_);
}

void Norm::forward_residual(const float* x, const float* r, float* s, float* y, int64_t rows) {
  x_ = s;
  mean_.resize(static_cast<size_t>(rows));
  rstd_.resize(static_cast<size_t>(rows));
  count_traffic(rows * C_ * 16);  // x, r in; s, y out
  if (kind_ == Normalization::LayerNorm) {
    cpu::add_layernorm_forward(s, y, mean_.data(), rstd_.data(), x, r, gamma_.data(), beta_.data(),
                               rows, C_, eps_);
  } else {
    cpu::add_rmsnorm_forward(s, y, rstd_.data(), x, r, gamma_.data(), rows, C_, eps_);
  }
}

CastStats Norm::forward_fp8_residual(const float* x, const float* r, float* s, uint8_t* y,
                                     float scale, Fp8Format f, int64_t rows) {
  x_ = s;
  mean_.resize(static_cast<size_t>(rows));
  rstd_.resize(static_cast<size_t>(rows));
  count_traffic(rows * C_ * 13);  // x, r in; s and codes out
  if (kind_ == Normalization::LayerNorm) {
    return cpu::add_layernorm_forward_fp8(s, y, scale, f, mean_.data(), rstd_.data(), x, r,
                                          gamma_.data(), beta_.data(), rows, C_, eps_);
  }
  return cpu::add_rmsnorm_forward_fp8(s, y, scale, f, rstd_.data(), x, r, gamma_.data(), rows, C_,
                                      eps_);
}

void Norm::backward(const float* dy, float* dx, int64_t rows) {
  count_traffic(rows * C_ * 16);  // dy, x, dx read and written
  if (kind_ == Normalization::LayerNorm) {
    cpu::layernorm_backward(dx, gamma_.grad.data(), beta_.grad.data(), dy, x_, gamma_.data(),
                            mean_.data(), rstd_.data(), rows, C_);
  } else {
    cpu::rmsnorm_backward(dx, gamma_.grad.data(), dy, x_, gamma_.data(), rstd_.data(), rows, C_);
  }
}

}  // namespace fp8lm
