#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "fp8lm/error.h"
#include "kernels/traffic.h"
#include "nn/fusion.h"

namespace fp8lm {
namespace {

constexpr int64_t kChunk = 1 << 14;

// Calls f(param index, begin, end) for fixed pieces of every parameter, in order.
template <class F>
void for_each_chunk(const ParameterList& params, F f) {
  for (size_t i = 0; i < params.size(); ++i) {
    const auto n = params[i]->numel();
    for (int64_t b = 0; b < n; b += kChunk) f(i, b, std::min(n, b + kChunk));
  }
}

inline float grad_value(float g) {
  return g;
}
inline float grad_value(bf16_t g) {
  return bf16_to_float(g);
}

template <class G>
double sum_of_squares(const G* g, int64_t begin, int64_t end) {
  double sum = 0.0;
  for (int64_t j = begin; j < end; ++j) {
    const double v = grad_value(g[j]);
    sum += v * v;
  }
  return sum;
}

struct AdamWStep {
  float lr, bc1, bc2, grad_scale;
  const AdamWConfig& cfg;
  // Out of line so the fused and unfused steps run the same machine code (same bits). G is
  // float, or bf16_t for the BF16 gradients of --fp8-weights.
  template <class G>
  [[gnu::noinline]] void operator()(float* w, const G* g, float* m, float* v, int64_t n,
                                    float decay) const {
    for (int64_t j = 0; j < n; ++j) {
      const float gj = grad_value(g[j]) * grad_scale;
      m[j] = cfg.beta1 * m[j] + (1.0f - cfg.beta1) * gj;
      v[j] = cfg.beta2 * v[j] + (1.0f - cfg.beta2) * gj * gj;
      const float update = (m[j] / bc1) / (std::sqrt(v[j] / bc2) + cfg.eps);
      w[j] -= lr * (update + decay * w[j]);
    }
  }
};

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
  for_each_chunk(params_, [&](size_t i, int64_t b, int64_t e) {
    chunks_.push_back({params_[i], i, b, e});
  });
  build_shard();
}

void AdamW::build_shard() {
  numel_ = 0;
  for (size_t i = begin_; i < end_; ++i) {  // the buffers outside the shard stay empty
    hold_moments(i);
    numel_ += params_[i]->numel();
  }
  // The chunks are in parameter order: the shard's are one run of them.
  const auto in_shard = [&](const Chunk& c) { return c.index >= begin_ && c.index < end_; };
  shard_chunks_ = std::span(chunks_).subspan(
      static_cast<size_t>(std::ranges::find_if(chunks_, in_shard) - chunks_.begin()),
      static_cast<size_t>(std::ranges::count_if(chunks_, in_shard)));
  if (be_.host_memory()) return;
  // A device: the multi-tensor table, FP32 gradients only (no BF16 gradient path there).
  std::vector<AdamWTensor> table;
  for (size_t i = begin_; i < end_; ++i) {
    Parameter& p = *params_[i];
    if (p.numel() == 0) continue;
    if (p.bf16_grad())
      throw Error(p.name + ": BF16 gradients have no " + be_.name() + " optimizer");
    AdamWTensor t;
    t.param = p.value.data();
    t.grad = p.grad.data();
    t.m = m_[i].data();
    t.v = v_[i].data();
    t.n = p.numel();
    t.decay = p.decay ? cfg_.weight_decay : 0.0f;
    table.push_back(t);
  }
  table_.resize(table.size());
  if (!table.empty()) table_.upload(table, "optimizer table");
  norm_clip_.resize(2);
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
  h.bc1 = 1.0f - std::pow(cfg_.beta1, static_cast<float>(t_));
  h.bc2 = 1.0f - std::pow(cfg_.beta2, static_cast<float>(t_));
  return h;
}

float AdamW::global_grad_norm() {
  if (be_.host_memory())
    return grad_norm(ParameterList(params_.begin() + static_cast<std::ptrdiff_t>(begin_),
                                   params_.begin() + static_cast<std::ptrdiff_t>(end_)));
  if (table_.size() == 0) return 0.0f;  // a shard of no parameters
  be_.grad_norm(norm_clip_.data(), nullptr, 0.0f, table_.data(), static_cast<int>(table_.size()),
                numel_);
  float norm = 0;
  be_.download(&norm, norm_clip_.data(), sizeof(float));
  return norm;
}

void AdamW::step(float lr, float grad_scale) {
  ++t_;
  const AdamWHyper h = hyper(lr);
  if (!be_.host_memory()) {
    be_.upload(norm_clip_.data() + 1, &grad_scale, sizeof(float));  // the clip slot's place
    if (table_.size() > 0)
      be_.adamw_step(table_.data(), static_cast<int>(table_.size()), numel_, h,
                     norm_clip_.data() + 1);
    for (Parameter* p : params_) ++p->version;
    return;
  }
  const AdamWStep update{lr, h.bc1, h.bc2, grad_scale, cfg_};
  count_traffic(numel_ * 28);  // w, m, v read and written; g read
  const auto run = [&](const Chunk& c) {
    Parameter& p = *c.p;
    float* m = m_[c.index].host().data() + c.begin;
    float* v = v_[c.index].host().data() + c.begin;
    const float decay = p.decay ? cfg_.weight_decay : 0.0f;
    if (p.bf16_grad()) {
      update(p.value.host().data() + c.begin, p.grad16.host().data() + c.begin, m, v,
             c.end - c.begin, decay);
    } else {
      update(p.value.host().data() + c.begin, p.grad.host().data() + c.begin, m, v, c.end - c.begin,
             decay);
    }
  };
  if (fusion_enabled()) {
    const auto n = static_cast<int64_t>(shard_chunks_.size());
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; ++k) run(shard_chunks_[static_cast<size_t>(k)]);
  } else {
    for (size_t i = begin_; i < end_; ++i) {
      const auto n = params_[i]->numel();
      const int64_t pieces = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < pieces; ++k)
        run({params_[i], i, k * kChunk, std::min(n, (k + 1) * kChunk)});
    }
  }
  for (Parameter* p : params_) ++p->version;
}

void AdamW::zero_grad() {
  if (!be_.host_memory()) {
    for (Parameter* p : params_) p->grad.zero();
    return;
  }
  const auto n = static_cast<int64_t>(chunks_.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    Parameter& p = *chunks_[k].p;
    if (p.bf16_grad()) {
      const auto g = p.grad16.host();
      std::fill(g.begin() + chunks_[k].begin, g.begin() + chunks_[k].end, bf16_t{0});
    } else {
      const auto g = p.grad.host();
      std::fill(g.begin() + chunks_[k].begin, g.begin() + chunks_[k].end, 0.0f);
    }
  }
}

float grad_norm(const ParameterList& params) {
  struct Piece {
    const Parameter* p;
    int64_t begin, end;
  };
  // Reused across calls (a steady-state step allocates nothing). The parallel region reaches
  // them through these pointers: naming a thread_local inside it would give each worker its own.
  thread_local std::vector<Piece> pieces_storage;
  thread_local std::vector<double> partial_storage;
  std::vector<Piece>& pieces = pieces_storage;
  pieces.clear();
  for_each_chunk(params, [&](size_t i, int64_t b, int64_t e) {
    pieces.push_back({params[i], b, e});
  });
  partial_storage.assign(pieces.size(), 0.0);
  const Piece* piece = pieces.data();
  double* partial = partial_storage.data();
  const auto n = static_cast<int64_t>(pieces.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    const Parameter& p = *piece[k].p;
    partial[k] = p.bf16_grad()
                     ? sum_of_squares(p.grad16.host().data(), piece[k].begin, piece[k].end)
                     : sum_of_squares(p.grad.host().data(), piece[k].begin, piece[k].end);
  }
  double sum = 0.0;
  for (int64_t k = 0; k < n; ++k) sum += partial[k];
  return static_cast<float>(std::sqrt(sum));
}

float clip_factor(float norm, float max_norm) {
  return max_norm > 0.0f && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
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
