#pragma once
// The vocabulary every backend's kernels share, so that no CUDA kernel includes a CPU kernel's
// header (or the reverse): whether a GEMM operand is transposed, and which activation or
// normalization a fused kernel applies.
#include <cstdint>
#include <string_view>

#include "fp8lm/model_config.h"  // Activation, Normalization

namespace fp8lm {

// op(X) = X (N) or Xᵀ (T); a transposed operand is stored with its dimensions swapped.
enum class Trans : bool { N = false, T = true };

std::string_view activation_name(Activation a);        // "gelu", "relu", "swiglu"
Activation parse_activation(std::string_view name);    // throws Error listing the choices
std::string_view normalization_name(Normalization n);  // "layernorm", "rmsnorm"
Normalization parse_normalization(std::string_view name);

}  // namespace fp8lm
