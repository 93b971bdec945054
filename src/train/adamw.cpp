#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace fp8lm {

AdamW::AdamW(ParameterList params, AdamWConfig cfg) : params_(std::move(params)), cfg_(cfg) {
  for (Parameter* p : params_) {
    m_.emplace_back(p->value.size(), 0.0f);
    v_.emplace_back(p->value.size(), 0.0f);
  }
}

void AdamW::step(float lr) {
  ++t_;
  const float bc1 = 1.0f - std::pow(cfg_.beta1, static_cast<float>(t_));
  const float bc2 = 1.0f - std::pow(cfg_.beta2, static_cast<float>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    float* w = p.value.data();
    const float* g = p.grad.data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    const float decay = p.decay ? cfg_.weight_decay : 0.0f;
    const auto n = static_cast<int64_t>(p.value.size());
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      m[j] = cfg_.beta1 * m[j] + (1.0f - cfg_.beta1) * g[j];
      v[j] = cfg_.beta2 * v[j] + (1.0f - cfg_.beta2) * g[j] * g[j];
      const float update = (m[j] / bc1) / (std::sqrt(v[j] / bc2) + cfg_.eps);
      w[j] -= lr * (update + decay * w[j]);
    }
    ++p.version;
  }
}

void AdamW::zero_grad() {
  for (Parameter* p : params_) std::fill(p->grad.begin(), p->grad.end(), 0.0f);
}

float clip_grad_norm(const ParameterList& params, float max_norm) {
  double sum = 0.0;
  for (const Parameter* p : params)
    for (float g : p->grad) sum += static_cast<double>(g) * g;
  const auto norm = static_cast<float>(std::sqrt(sum));
  if (max_norm > 0.0f && norm > max_norm) {
    const float s = max_norm / (norm + 1e-6f);
    for (Parameter* p : params)
      for (float& g : p->grad) g *= s;
  }
  return norm;
}

float learning_rate(int64_t step, int64_t total, int64_t warmup, float max_lr, float min_lr) {
  if (step < warmup) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (total <= warmup) return max_lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(min_lr + (max_lr - min_lr) * cosine);
}

}  // namespace fp8lm
