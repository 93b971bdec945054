#pragma once
// TE's DotProductAttention (causal, scaled, flash style; BF16 products in training under BF16
// or FP8 GEMMs, else FP32 math, docs/reference/numerics.md; grouped-query attention where there
// are fewer key/value heads) and MultiheadAttention (the pre-attention norm fused
// into the QKV projection, rotary position embeddings if the model has them, attention, output
// projection).
#include <string>

#include "fp8lm/model_config.h"

#include "nn/layernorm_linear.h"
#include "nn/saved_activation.h"

namespace fp8lm {

class DotProductAttention {
 public:
  DotProductAttention(int64_t n_heads, int64_t n_kv_heads, Backend& backend = cpu_backend())
      : be_(backend), n_heads_(n_heads), n_kv_heads_(n_kv_heads) {}
  // qkv [B, T, C + 2*Ckv] (q, k, v per token) -> out [B, T, C]. qkv and out stay valid until
  // backward.
  void forward(const float* qkv, float* out, int64_t B, int64_t T, int64_t C);
  // dqkv like qkv, overwritten; qkv: forward's input as MultiheadAttention saved it (forward's
  // pointer is valid during forward only), its BF16 copy read as it is where the fused kernels
  // take one, else its FP32 values.
  void backward(const float* dout, float* dqkv, SavedActivation& qkv);
  MemoryUse memory_use() const { return {bytes_of(lse_) + bytes_of(probs_), 0}; }

 private:
  Backend& be_;
  int64_t n_heads_, n_kv_heads_;
  AttentionShape shape_{};
  const float* out_ = nullptr;
  BackendBuffer<float> lse_{be_};
  bool fused_ = true;                // what forward ran, for backward
  BackendBuffer<float> probs_{be_};  // --no-fusion: [B, H, T, T]
};

// One sequence batch's keys and values for generation: [B, Tmax, Ckv] each (after the rotary
// embedding, where there is one), in the backend's memory.
struct KvCache {
  KvCache(Backend& backend, int64_t batch, int64_t max_len, int64_t width)
      : B(batch),
        Tmax(max_len),
        C(width),
        k(backend, static_cast<size_t>(batch * max_len * width)),
        v(backend, static_cast<size_t>(batch * max_len * width)) {}
  int64_t B, Tmax, C;
  BackendBuffer<float> k, v;
};

class MultiheadAttention {
 public:
  // Names: {prefix}.ln1, {prefix}.qkv, {prefix}.proj. The qkv projection's outputs are the
  // d query columns, then cfg.kv_width() key and as many value columns.
  MultiheadAttention(const std::string& prefix, const GPTConfig& cfg,
                     Backend& backend = cpu_backend());

  void forward(const float* x, float* y, int64_t B, int64_t T);  // y overwritten
  void backward(const float* dy, float* dx);                     // dx +=, dx may be dy (read first)

  // Generation: fills the cache from the last forward (positions [0, T)).
  void fill_cache(KvCache& cache) const;
  // One new token per sequence at position pos: x [B, C] -> y [B, C]; appends to the cache.
  void decode(const float* x, float* y, KvCache& cache, int64_t pos);

  LayerNormLinear& qkv() { return qkv_; }
  Linear& proj() { return proj_; }
  MemoryUse memory_use() const {
    MemoryUse m{qkv_out_.bytes() + bytes_of(att_out_) + bytes_of(q1_), 0};
    m += qkv_.memory_use();
    m += attention_.memory_use();
    m += proj_.memory_use();
    return m;
  }
  ParameterList parameters();

 private:
  // The rotary embedding of rows (row r at position pos0 + r % T) of packed qkv in place: q and
  // k, which lie side by side; inverse on their gradients.
  void rope(float* qkv, int64_t rows, int64_t T, int64_t pos0, bool inverse);
  Backend& be_;
  int64_t d_, n_heads_, n_kv_heads_, kv_;  // kv_: the width of each of k and v
  double rope_theta_;
  int64_t B_ = 0, T_ = 0;
  LayerNormLinear qkv_;
  DotProductAttention attention_;
  Linear proj_;
  SavedActivation qkv_out_{Scratch::QkvOut, be_};  // q, k, v: saved (BF16 in low precision)
  BackendBuffer<float> att_out_{be_}, q1_{be_};    // the attention output: saved
};

}  // namespace fp8lm
