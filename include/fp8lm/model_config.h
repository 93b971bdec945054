#pragma once
// The shape of a GPT model: what builds it, what a checkpoint records.
#include <cstdint>

namespace fp8lm {

// The MLP's activation. SwiGLU takes [gate | value] rows of 2F columns and gives F.
enum class Activation : uint8_t { Gelu, Relu, Swiglu };

enum class Normalization : uint8_t { LayerNorm, RMSNorm };

struct GPTConfig {
  int64_t vocab = 128;
  int64_t seq_len = 64;  // the position table's length: the longest sequence the model sees
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 8;
  int64_t ffn = 1024;
  Activation activation = Activation::Gelu;
  Normalization normalization = Normalization::LayerNorm;

  // Throws Error naming the flag for zero or negative sizes and heads not dividing d_model.
  void validate() const;
  // Weight count (tied head counted once).
  int64_t parameter_count() const;
};

}  // namespace fp8lm
