#pragma once
// The vocabulary every backend's kernels share, so that no CUDA kernel includes a CPU kernel's
// header (or the reverse): whether a GEMM operand is transposed, and which activation or
// normalization a fused kernel applies, and how attention's packed rows are laid out.
#include <cstdint>
#include <string_view>
#include <vector>

#include "fp8lm/model_config.h"  // Activation, Normalization

namespace fp8lm {

// op(X) = X (N) or Xᵀ (T); a transposed operand is stored with its dimensions swapped.
enum class Trans : bool { N = false, T = true };

// From the list FP8LM_ACTIVATIONS (fp8lm/model_config.h).
std::string_view activation_name(Activation a);           // "gelu", "relu", "swiglu"
Activation parse_activation(std::string_view name);       // throws Error listing the choices
const std::vector<std::string_view>& activation_names();  // every name, in the list's order
std::string_view activation_hf_name(Activation a);        // "gelu_new", "relu", "silu"
// Whether the activation is gated: it reads [gate | value] rows of 2F columns and gives F.
bool activation_gated(Activation a);
// The columns of the MLP's first GEMM for a hidden width ffn: 2 ffn when gated.
int64_t activation_input_width(Activation a, int64_t ffn);
// From the list FP8LM_NORMALIZATIONS (fp8lm/model_config.h).
std::string_view normalization_name(Normalization n);      // "layernorm", "rmsnorm"
Normalization parse_normalization(std::string_view name);  // throws Error listing the choices
std::vector<std::string_view> normalization_names();
// Whether it centres each row on its mean and adds a bias (LayerNorm's beta).
bool normalization_centred(Normalization n);

// Where each head's values lie in a packed qkv row [C + 2*Ckv]: C query values (H heads of hd),
// then Ckv = Hkv * hd key values and as many value values; query head h reads key/value head
// h / (H / Hkv), as Llama's repeat_kv does.
struct QkvLayout {
  QkvLayout(int64_t c, int64_t H, int64_t Hkv)
      : hd(c / H), C(c), Ckv(Hkv * hd), row(C + 2 * Ckv), group(H / Hkv) {}
  explicit QkvLayout(const struct AttentionShape& s);
  int64_t hd, C, Ckv, row, group;
  int64_t q(int64_t h) const { return h * hd; }
  int64_t k(int64_t h) const { return C + h / group * hd; }
  int64_t v(int64_t h) const { return C + Ckv + h / group * hd; }
};

// Causal attention's shape: B sequences of T positions (a KV cache's capacity for decode) over
// packed qkv rows [C + 2*Ckv], H query heads sharing Hkv key/value heads.
struct AttentionShape {
  int64_t B, T, C, H, Hkv;
  // BF16 math (kernels/cpu/attention.h's *_bf16): training under BF16 or FP8 GEMMs, as TE runs
  // attention in the activation dtype. A GPU's flash attention always is.
  bool bf16 = false;
};
inline QkvLayout::QkvLayout(const AttentionShape& s) : QkvLayout(s.C, s.H, s.Hkv) {}

// A norm layer over rows of C values: its kind, gamma and beta (null for RMSNorm), epsilon.
struct NormParams {
  Normalization kind;
  const float* gamma;
  const float* beta;
  int64_t C;
  float eps;
};
// What a norm's forward keeps per row for its backward: the mean (unused by RMSNorm, may be
// null) and the reciprocal standard deviation.
struct NormStats {
  float* mean;
  float* rstd;
};

}  // namespace fp8lm
