#include "nn/norm.h"

namespace fp8lm {

Norm::Norm(std::string name, int64_t C, Normalization kind, float eps, Backend& backend)
    : be_(backend),
      kind_(kind),
      C_(C),
      eps_(eps),
      gamma_(name + ".weight", {C}, /*decays=*/false, backend),
      beta_(name + ".bias", {kind == Normalization::LayerNorm ? C : 0}, /*decays=*/false, backend) {
  gamma_.set_values(std::vector<float>(static_cast<size_t>(C), 1.0f));
}

ParameterList Norm::parameters() {
  if (kind_ == Normalization::LayerNorm) return {&gamma_, &beta_};
  return {&gamma_};
}

void Norm::forward(const ProducerOut& out, const float* x, int64_t rows, const float* r, float* s) {
  x_ = r ? s : x;
  mean_.resize(static_cast<size_t>(rows));
  rstd_.resize(static_cast<size_t>(rows));
  be_.norm_forward(params(), {mean_.data(), rstd_.data()}, out, s, x, r, rows);
}

void Norm::backward(const float* dy, float* dx, int64_t rows) {
  float* dbeta = kind_ == Normalization::LayerNorm ? beta_.grad.data() : nullptr;
  be_.norm_backward(params(), {mean_.data(), rstd_.data()}, dx, gamma_.grad.data(), dbeta, dy, x_,
                    rows);
}

NormParams Norm::params() {
  const float* beta = kind_ == Normalization::LayerNorm ? beta_.data() : nullptr;
  return {kind_, gamma_.data(), beta, C_, eps_};
}

}  // namespace fp8lm
