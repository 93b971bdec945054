#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "fp8lm/error.h"
#include "kernels/adamw_ops.h"
#include "nn/fusion.h"

namespace fp8lm {
namespace {

// A parameter's gradient as an optimizer table entry: FP32, or BF16 (--fp8-weights).
AdamWTensor gradient_entry(const Parameter& p) {
  AdamWTensor t;
  t.grad = p.grad.data();
  t.grad16 = p.bf16_grad() ? p.grad16.data() : nullptr;
  t.n = p.numel();
  return t;
}

// 1 - beta^t as every step's hyper-parameters have it.
float bias_correction(float beta, int64_t t) {
  return 1.0f - std::pow(beta, static_cast<float>(t));
}

Backend& backend_of(const ParameterList& params) {
  return params.empty() ? cpu_backend() : params.front()->value.backend();
}

}  // namespace

AdamW::AdamW(ParameterList params, AdamWConfig cfg, OptimizerShard shard)
    : params_(std::move(params)),
      cfg_(cfg),
      be_(backend_of(params_)),
      begin_(std::min(shard.begin, params_.size())),
      end_(std::clamp(shard.end, begin_, params_.size())) {
  m_.reserve(params_.size());
  v_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    m_.emplace_back(be_);
    v_.emplace_back(be_);
  }
  build_shard();
}

void AdamW::build_shard() {
  numel_ = 0;
  for (size_t i = begin_; i < end_; ++i) {  // the buffers outside the shard stay empty
    hold_moments(i);
    numel_ += params_[i]->numel();
  }
  norm_clip_.resize(2);
}

void AdamW::refresh_table() {
  // The parameters' buffers as they are now (--fp8-weights moves gradients to BF16 after the
  // optimizer is made), uploaded again only when they changed.
  fresh_.clear();
  copied_.clear();
  for (size_t i = begin_; i < end_; ++i) {
    Parameter& p = *params_[i];
    if (p.numel() == 0) continue;
    if (p.bf16_grad() && !be_.host_memory())
      throw Error(p.name + ": BF16 gradients have no " + be_.name() + " optimizer");
    AdamWTensor t = gradient_entry(p);
    t.param = p.value.data();
    t.m = m_[i].data();
    t.v = v_[i].data();
    t.decay = p.decay ? cfg_.weight_decay : 0.0f;
    // A BF16 copy a GEMM keeps (Parameter::value16) is refreshed in the update's pass while it
    // is current: a skipped step leaves value and the copy as they were, still matching.
    // --no-fusion leaves it to the GEMM's own cast.
    if (fusion_enabled() && p.bf16_value_current()) {
      t.param16 = p.value16.data();
      copied_.push_back(&p);
    }
    fresh_.push_back(t);
  }
  if (fresh_ == tensors_) return;
  tensors_ = fresh_;
  table_.resize(tensors_.size());
  if (!tensors_.empty()) table_.upload(tensors_, "optimizer table");
}

void AdamW::hold_moments(size_t i) {
  if (holds_moments(i)) return;
  for (BackendBuffer<float>* b : {&m_[i], &v_[i]}) {
    b->resize(static_cast<size_t>(params_[i]->numel()));
    b->zero();
  }
}

void AdamW::hold_all_moments() {
  for (size_t i = 0; i < params_.size(); ++i) hold_moments(i);
}

void AdamW::release_moments_outside_shard() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i >= begin_ && i < end_) continue;
    m_[i].clear();
    v_[i].clear();
  }
}

void AdamW::set_moments(size_t i, const std::vector<float>& m, const std::vector<float>& v) {
  m_[i].upload(m, "adamw.m." + params_[i]->name);
  v_[i].upload(v, "adamw.v." + params_[i]->name);
}

AdamWHyper AdamW::hyper(float lr) const {
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.bc1 = bias_correction(cfg_.beta1, t_);
  h.bc2 = bias_correction(cfg_.beta2, t_);
  return h;
}

void AdamW::cover_bias_corrections(int64_t t) {
  const auto need = static_cast<size_t>(2 * (t + 1));
  if (bias_corrections_.size() >= need) return;
  size_t n = std::max<size_t>(2 * 1024, bias_corrections_.size());
  while (n < need) n *= 2;
  std::vector<float> table(n);
  for (size_t k = 0; 2 * k < n; ++k) {
    table[2 * k] = bias_correction(cfg_.beta1, static_cast<int64_t>(k));
    table[2 * k + 1] = bias_correction(cfg_.beta2, static_cast<int64_t>(k));
  }
  bias_corrections_.resize(n);
  bias_corrections_.upload(table, "optimizer bias corrections");
}

AdamW::DecidedStep AdamW::step_decided_on_backend(float lr, float max_norm, const float* losses,
                                                  int64_t rows) {
  if (decision_.size() == 0) decision_.resize(1);
  if (!decision_steps_current_) {  // the host's count, e.g. a resumed run's, goes first
    StepDecision d;
    d.steps = static_cast<int32_t>(t_);
    decision_.upload({d}, "optimizer step count");
    decision_steps_current_ = true;
  }
  ++t_;  // taken, as far as the host knows yet
  cover_bias_corrections(t_);
  const float* norm = grad_norm_on_device(max_norm);
  be_.decide_step(decision_.data(), losses, rows, norm, bias_corrections_.data());
  // The clip factor's slot; the bias corrections are the decision's.
  update(hyper(lr), norm_clip_.data() + 1, decision_.data());
  return {norm, decision_.data()};
}

const float* AdamW::grad_norm_on_device(float max_norm) {
  refresh_table();
  if (tensors_.empty()) return nullptr;  // a shard of no parameters
  be_.grad_norm(norm_clip_.data(), norm_clip_.data() + 1, max_norm, table_.data(),
                static_cast<int>(tensors_.size()), numel_);
  return norm_clip_.data();
}

float AdamW::global_grad_norm() {
  const float* on_device = grad_norm_on_device();
  float norm = 0;
  if (on_device) be_.download(&norm, on_device, sizeof(float));
  return norm;
}

void AdamW::step(float lr, float grad_scale) {
  ++t_;
  decision_steps_current_ = false;
  refresh_table();
  float* scale = norm_clip_.data() + 1;  // the clip slot's place
  be_.upload(scale, &grad_scale, sizeof(float));
  update(hyper(lr), scale, nullptr);
}

void AdamW::update(const AdamWHyper& h, const float* grad_scale, const StepDecision* decision) {
  if (fusion_enabled()) {  // one pass over every tensor
    if (!tensors_.empty())
      be_.adamw_step(table_.data(), static_cast<int>(tensors_.size()), numel_, h, grad_scale,
                     decision);
  } else {
    for (size_t k = 0; k < tensors_.size(); ++k)
      be_.adamw_step(table_.data() + k, 1, tensors_[k].n, h, grad_scale, decision);
  }
  for (Parameter* p : params_) ++p->version;
  for (Parameter* p : copied_) p->value16_version = p->version;
}

void AdamW::zero_grad() {
  for (Parameter* p : params_) {
    p->grad.zero();
    p->grad16.zero();  // --fp8-weights' BF16 gradients (empty otherwise)
  }
}

float grad_norm(const ParameterList& params) {
  thread_local std::vector<AdamWTensor> table;
  table.clear();
  int64_t total = 0;
  for (const Parameter* p : params) {
    table.push_back(gradient_entry(*p));
    total += p->numel();
  }
  float norm = 0;
  cpu_backend().grad_norm(&norm, nullptr, 0.0f, table.data(), static_cast<int>(table.size()),
                          total);
  return norm;
}

float clip_factor(float norm, float max_norm) {
  return adamw::clip_factor(norm, max_norm);
}

float clip_grad_norm(const ParameterList& params, float max_norm) {
  const float norm = grad_norm(params);
  const float s = clip_factor(norm, max_norm);
  if (s != 1.0f) {
    for (Parameter* p : params) {
      for (float& g : p->grad.host()) g *= s;
      for (bf16_t& g : p->grad16.host()) g = bf16_from_float(bf16_to_float(g) * s);
    }
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
