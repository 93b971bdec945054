#pragma once
// The shape of a GPT model: what builds it, what a checkpoint records. The defaults are GPT-2's
// block (learned positions, LayerNorm, GELU, biases, tied head); Llama's is RMSNorm, SwiGLU,
// rope_theta 10000 (or 500000), fewer key/value heads, no biases and an untied head.
#include <cstdint>

namespace fp8lm {

// Every activation of the MLP, once: X(enumerator, name, Hugging Face's name for it). The
// enum, the names, the parser and its error text, the --activation choices and the dispatch to
// each activation's functor (src/kernels/activation_ops.h, with its math and whether it is
// gated: SwiGLU takes [gate | value] rows of 2F columns and gives F) all come from this list.
#define FP8LM_ACTIVATIONS(X)  \
  X(Gelu, "gelu", "gelu_new") \
  X(Relu, "relu", "relu")     \
  X(Swiglu, "swiglu", "silu") \
  X(Geglu, "geglu", "gelu_pytorch_tanh")

enum class Activation : uint8_t {
#define FP8LM_ACTIVATION_ENUMERATOR(e, name, hf_name) e,
  FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_ENUMERATOR)
#undef FP8LM_ACTIVATION_ENUMERATOR
};

// Every normalization, once: X(enumerator, name). The enum, the names, the parser and the
// dispatch to each one's functor (src/kernels/norm_ops.h) come from this list.
#define FP8LM_NORMALIZATIONS(X) \
  X(LayerNorm, "layernorm")     \
  X(RMSNorm, "rmsnorm")

enum class Normalization : uint8_t {
#define FP8LM_NORMALIZATION_ENUMERATOR(e, name) e,
  FP8LM_NORMALIZATIONS(FP8LM_NORMALIZATION_ENUMERATOR)
#undef FP8LM_NORMALIZATION_ENUMERATOR
};

struct GPTConfig {
  int64_t vocab = 128;
  int64_t seq_len = 64;  // the position table's length: the longest sequence the model sees
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 8;
  int64_t ffn = 1024;
  Activation activation = Activation::Gelu;
  Normalization normalization = Normalization::LayerNorm;
  // Key/value heads of grouped-query attention; 0 means n_heads (multi-head attention).
  int64_t n_kv_heads = 0;
  // Rotary position embeddings with this base; 0: a learned position table instead.
  double rope_theta = 0;
  bool bias = true;       // biases in every Linear
  bool tied_head = true;  // the LM head is the token embedding

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_width() const { return kv_heads() * head_dim(); }  // each of k and v
  bool learned_positions() const { return rope_theta == 0; }

  // Throws Error naming the flag for zero or negative sizes and heads not dividing d_model.
  void validate() const;
  // Weight count (tied head counted once).
  int64_t parameter_count() const;
};

}  // namespace fp8lm
