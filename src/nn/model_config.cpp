// GPTConfig's checks and parameter count (include/fp8lm/model_config.h): apart from the model so
// that readers of configs (an HF import's config.json, fuzzed alone) need not link the network.
#include <fmt/format.h>

#include <cmath>

#include "fp8lm/error.h"
#include "fp8lm/model_config.h"
#include "kernels/types.h"

namespace fp8lm {

namespace {

// In double for validation: sizes that would overflow int64 are caught, not wrapped.
template <class T>
T count_parameters(const GPTConfig& c) {
  const T d = static_cast<T>(c.d_model), ffn = static_cast<T>(c.ffn);
  const T fc1_out = activation_gated(c.activation) ? 2 * ffn : ffn;
  const T norm = c.normalization == Normalization::LayerNorm ? 2 * d : d;
  const T qkv = d + 2 * static_cast<T>(c.n_heads > 0 ? c.kv_width() : 0);
  const T bias = c.bias ? 1 : 0;
  const T layer = 2 * norm + (qkv * d + bias * qkv) + (d * d + bias * d) +
                  (fc1_out * d + bias * fc1_out) + (d * ffn + bias * d);
  const T embeddings = static_cast<T>(c.vocab) * d * (c.tied_head ? 1 : 2) +
                       (c.learned_positions() ? static_cast<T>(c.seq_len) * d : 0);
  return embeddings + static_cast<T>(c.n_layers) * layer + norm;
}

}  // namespace

void GPTConfig::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"--vocab", vocab},     {"--seq-len", seq_len},
                                                   {"--d-model", d_model}, {"--n-layers", n_layers},
                                                   {"--n-heads", n_heads}, {"--ffn", ffn}};
  for (const auto& [flag, v] : sizes) {
    if (v <= 0) throw Error(fmt::format("{} {} must be positive", flag, v));
  }
  if (d_model % n_heads != 0) {
    throw Error(fmt::format("--n-heads {} does not divide --d-model {}", n_heads, d_model));
  }
  if (n_kv_heads < 0 || n_heads % kv_heads() != 0) {
    throw Error(fmt::format("--n-kv-heads {} does not divide --n-heads {}", n_kv_heads, n_heads));
  }
  if (!(rope_theta >= 0) || !std::isfinite(rope_theta)) {
    throw Error(
        fmt::format("--rope-theta {} must be 0 (learned positions) or positive", rope_theta));
  }
  if (rope_theta > 0 && head_dim() % 2 != 0) {
    throw Error(fmt::format("--rope-theta needs an even head size; d_model {} / n_heads {} = {}",
                            d_model, n_heads, head_dim()));
  }
  if (vocab > (int64_t{1} << 31) - 1) throw Error(fmt::format("--vocab {} is too large", vocab));
  const double params = count_parameters<double>(*this);
  if (params > 1e15) throw Error(fmt::format("the model is too large: {:.3g} parameters", params));
}

int64_t GPTConfig::parameter_count() const {
  return count_parameters<int64_t>(*this);
}

}  // namespace fp8lm
