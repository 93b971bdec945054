#include "nn/attention.h"

#include <algorithm>

#include "nn/fusion.h"
#include "nn/scratch.h"

namespace fp8lm {

void DotProductAttention::forward(const float* qkv, float* out, int64_t B, int64_t T, int64_t C) {
  B_ = B, T_ = T, C_ = C;
  out_ = out;
  fused_ = fusion_enabled();
  if (!fused_) {
    probs_.resize(static_cast<size_t>(B * n_heads_ * T * T));
    be_.attention_forward_unfused(out, probs_.data(), qkv, B, T, C, n_heads_);
    return;
  }
  lse_.resize(static_cast<size_t>(B * n_heads_ * T));
  be_.attention_forward(out, lse_.data(), qkv, B, T, C, n_heads_);
}

void DotProductAttention::backward(const float* dout, float* dqkv, const float* qkv) {
  if (!fused_) {
    be_.attention_backward_unfused(dqkv, dout, qkv, probs_.data(), B_, T_, C_, n_heads_);
    return;
  }
  be_.attention_backward(dqkv, dout, qkv, out_, lse_.data(), B_, T_, C_, n_heads_);
}

MultiheadAttention::MultiheadAttention(const std::string& prefix, int64_t d, int64_t n_heads,
                                       Normalization norm, Backend& backend)
    : be_(backend),
      d_(d),
      n_heads_(n_heads),
      qkv_(prefix + ".ln1", prefix + ".qkv", d, 3 * d, norm, /*bias=*/true, backend),
      attention_(n_heads, backend),
      proj_(prefix + ".proj", d, d, /*bias=*/true, backend) {}

ParameterList MultiheadAttention::parameters() {
  ParameterList p = qkv_.parameters();
  for (Parameter* q : proj_.parameters()) p.push_back(q);
  return p;
}

void MultiheadAttention::forward(const float* x, float* y, int64_t B, int64_t T) {
  B_ = B, T_ = T;
  const int64_t rows = B * T;
  float* qkv =
      qkv_out_.begin(rows * 3 * d_, training_forward() && current_gemm_mode() != GemmMode::Fp32);
  att_out_.resize(static_cast<size_t>(rows * d_));
  qkv_.forward(x, qkv, rows);
  attention_.forward(qkv, att_out_.data(), B, T, d_);
  qkv_out_.save();
  proj_.forward(att_out_.data(), y, rows);
}

void MultiheadAttention::backward(const float* dy, float* dx) {
  const int64_t rows = B_ * T_;
  float* datt = scratch<float>(be_, Scratch::AttnDOut, rows * d_);
  float* dqkv = scratch<float>(be_, Scratch::AttnDQkv, rows * 3 * d_);
  proj_.backward(dy, datt, rows, /*accumulate_dx=*/false);
  attention_.backward(datt, dqkv, qkv_out_.values());
  qkv_.backward(dqkv, dx, rows);
}

void MultiheadAttention::fill_cache(KvCache& cache) const {
  const size_t row = static_cast<size_t>(d_) * sizeof(float);
  for (int64_t b = 0; b < B_; ++b) {
    const float* qkv = qkv_out_.mutable_values() + b * T_ * 3 * d_;
    const int64_t at = b * cache.Tmax * d_;
    be_.copy_rows(cache.k.data() + at, row, qkv + d_, 3 * row, row, static_cast<size_t>(T_));
    be_.copy_rows(cache.v.data() + at, row, qkv + 2 * d_, 3 * row, row, static_cast<size_t>(T_));
  }
}

void MultiheadAttention::decode(const float* x, float* y, KvCache& cache, int64_t pos) {
  const int64_t B = cache.B;
  qkv_out_.begin(B * 3 * d_, /*bf16=*/false);
  q1_.resize(static_cast<size_t>(B * d_));
  att_out_.resize(static_cast<size_t>(B * d_));
  const float* qkv = qkv_out_.mutable_values();
  qkv_.forward(x, qkv_out_.mutable_values(), B);
  // Each sequence's q, and its k and v appended at pos.
  const size_t row = static_cast<size_t>(d_) * sizeof(float), rows = static_cast<size_t>(B);
  const size_t cache_pitch = static_cast<size_t>(cache.Tmax) * row;
  be_.copy_rows(q1_.data(), row, qkv, 3 * row, row, rows);
  be_.copy_rows(cache.k.data() + pos * d_, cache_pitch, qkv + d_, 3 * row, row, rows);
  be_.copy_rows(cache.v.data() + pos * d_, cache_pitch, qkv + 2 * d_, 3 * row, row, rows);
  be_.attention_decode(att_out_.data(), q1_.data(), cache.k.data(), cache.v.data(), B, cache.Tmax,
                       pos + 1, d_, n_heads_);
  proj_.forward(att_out_.data(), y, B);
}

}  // namespace fp8lm
