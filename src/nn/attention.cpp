#include "nn/attention.h"

#include "nn/fusion.h"
#include "nn/scratch.h"

namespace fp8lm {

void DotProductAttention::forward(const float* qkv, float* out, int64_t B, int64_t T, int64_t C) {
  // BF16 products where the GEMMs are BF16 or FP8 and a loss is computed (numerics.md).
  const bool bf16 = training_forward() && current_gemm_precision() != Precision::Fp32;
  shape_ = {B, T, C, n_heads_, n_kv_heads_, bf16};
  out_ = out;
  fused_ = fusion_enabled();
  if (!fused_) {
    probs_.resize(static_cast<size_t>(B * n_heads_ * T * T));
    be_.attention_forward_unfused(shape_, out, probs_.data(), qkv);
    return;
  }
  lse_.resize(static_cast<size_t>(B * n_heads_ * T));
  be_.attention_forward(shape_, out, lse_.data(), qkv);
}

void DotProductAttention::backward(const float* dout, float* dqkv, SavedActivation& qkv) {
  if (!fused_) {
    return be_.attention_backward_unfused(shape_, dqkv, dout, qkv.values(), probs_.data());
  }
  if (const bf16_t* qkv16 = qkv.bf16_copy()) {
    return be_.attention_backward_bf16_qkv(shape_, dqkv, dout, qkv16, qkv.widening_room(), out_,
                                           lse_.data());
  }
  be_.attention_backward(shape_, dqkv, dout, qkv.values(), out_, lse_.data());
}

MultiheadAttention::MultiheadAttention(const std::string& prefix, const GPTConfig& cfg,
                                       Backend& backend)
    : be_(backend),
      d_(cfg.d_model),
      n_heads_(cfg.n_heads),
      n_kv_heads_(cfg.kv_heads()),
      kv_(cfg.kv_width()),
      rope_theta_(cfg.rope_theta),
      qkv_(prefix + ".ln1", prefix + ".qkv", d_, d_ + 2 * kv_, cfg.normalization, cfg.bias,
           backend),
      attention_(n_heads_, n_kv_heads_, backend),
      proj_(prefix + ".proj", d_, d_, cfg.bias, backend) {}

void MultiheadAttention::rope(float* qkv, int64_t rows, int64_t T, int64_t pos0, bool inverse) {
  if (rope_theta_ == 0) return;
  be_.rope(qkv, rows, T, pos0, d_ + 2 * kv_, n_heads_ + n_kv_heads_, d_ / n_heads_,
           static_cast<float>(rope_theta_), inverse);
}

ParameterList MultiheadAttention::parameters() {
  ParameterList p = qkv_.parameters();
  for (Parameter* q : proj_.parameters()) p.push_back(q);
  return p;
}

void MultiheadAttention::forward(const float* x, float* y, int64_t B, int64_t T) {
  B_ = B, T_ = T;
  const int64_t rows = B * T;
  float* qkv = qkv_out_.begin(rows * (d_ + 2 * kv_),
                              training_forward() && current_gemm_precision() != Precision::Fp32);
  att_out_.resize(static_cast<size_t>(rows * d_));
  qkv_.forward(x, qkv, rows);
  rope(qkv, rows, T, 0, /*inverse=*/false);  // attention, and backward, see the turned q and k
  attention_.forward(qkv, att_out_.data(), B, T, d_);
  qkv_out_.save();
  proj_.forward(att_out_.data(), y, rows);
}

void MultiheadAttention::backward(const float* dy, float* dx) {
  const int64_t rows = B_ * T_;
  float* datt = scratch<float>(be_, Scratch::AttnDOut, rows * d_);
  float* dqkv = scratch<float>(be_, Scratch::AttnDQkv, rows * (d_ + 2 * kv_));
  proj_.backward(dy, datt, rows, /*accumulate_dx=*/false);
  attention_.backward(datt, dqkv, qkv_out_);
  rope(dqkv, rows, T_, 0, /*inverse=*/true);  // a rotation's transpose turns back
  qkv_.backward(dqkv, dx, rows);
}

void MultiheadAttention::fill_cache(KvCache& cache) const {
  const size_t width = static_cast<size_t>(d_ + 2 * kv_) * sizeof(float);
  const size_t kv_row = static_cast<size_t>(kv_) * sizeof(float);
  for (int64_t b = 0; b < B_; ++b) {
    const float* qkv = qkv_out_.mutable_values() + b * T_ * (d_ + 2 * kv_);
    const int64_t at = b * cache.Tmax * kv_;
    be_.copy_rows(cache.k.data() + at, kv_row, qkv + d_, width, kv_row, static_cast<size_t>(T_));
    be_.copy_rows(cache.v.data() + at, kv_row, qkv + d_ + kv_, width, kv_row,
                  static_cast<size_t>(T_));
  }
}

void MultiheadAttention::decode(const float* x, float* y, KvCache& cache, int64_t pos) {
  const int64_t B = cache.B;
  float* qkv = qkv_out_.begin(B * (d_ + 2 * kv_), /*bf16=*/false);
  q1_.resize(static_cast<size_t>(B * d_));
  att_out_.resize(static_cast<size_t>(B * d_));
  qkv_.forward(x, qkv, B);
  rope(qkv, B, 1, pos, /*inverse=*/false);
  // Each sequence's q, and its k and v appended at pos.
  const size_t width = static_cast<size_t>(d_ + 2 * kv_) * sizeof(float);
  const size_t q_row = static_cast<size_t>(d_) * sizeof(float);
  const size_t kv_row = static_cast<size_t>(kv_) * sizeof(float), rows = static_cast<size_t>(B);
  const size_t cache_pitch = static_cast<size_t>(cache.Tmax) * kv_row;
  be_.copy_rows(q1_.data(), q_row, qkv, width, q_row, rows);
  be_.copy_rows(cache.k.data() + pos * kv_, cache_pitch, qkv + d_, width, kv_row, rows);
  be_.copy_rows(cache.v.data() + pos * kv_, cache_pitch, qkv + d_ + kv_, width, kv_row, rows);
  be_.attention_decode({B, cache.Tmax, d_, n_heads_, n_kv_heads_}, pos + 1, att_out_.data(),
                       q1_.data(), cache.k.data(), cache.v.data());
  proj_.forward(att_out_.data(), y, B);
}

}  // namespace fp8lm
