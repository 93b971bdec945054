#include "io/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"
#include "kernels/types.h"

namespace fp8lm {
namespace {

using Json = nlohmann::json;

// A size as config.json writes it: an integer from 0 to INT64_MAX, read as written (1e300 or
// 2^64 is not cast to some other integer).
int64_t size_value(const Json& v, const char* key, const std::string& origin) {
  const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT64_MAX}
                                         : v.is_number_integer() && v.get<int64_t>() >= 0;
  if (!ok)
    throw Error(fmt::format("{}: config.json '{}' is {}, not an integer from 0 to {}", origin, key,
                            v.dump(), INT64_MAX));
  return v.get<int64_t>();
}

int64_t field(const Json& j, const char* key, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null())
    throw Error(fmt::format("{}: config.json has no '{}'", origin, key));
  return size_value(j[key], key, origin);
}

// An optional size: its value when present, else fallback.
int64_t field_or(const Json& j, const char* key, int64_t fallback, const std::string& origin) {
  return j.contains(key) && !j[key].is_null() ? size_value(j[key], key, origin) : fallback;
}

// A field this engine has one value for: absent, or equal to it.
template <class T>
void require(const Json& j, const char* key, const T& want, const std::string& origin,
             const char* why) {
  if (!j.contains(key) || j[key].is_null()) return;
  const Json& v = j[key];
  bool same = false;
  if constexpr (std::is_floating_point_v<T>) {
    same = v.is_number() && std::fabs(v.get<double>() - want) <= 1e-12;
  } else {
    same = v == Json(want);
  }
  if (!same) throw Error(fmt::format("{}: config.json '{}' is {}: {}", origin, key, v.dump(), why));
}

// The activation config.json names under key (fallback when absent) among fp8lm's gated ones
// (Llama's MLP: act(gate) * up) or its plain ones (GPT-2's); GELU's tanh form has two names.
Activation activation_from_hf(const Json& j, const char* key, const char* fallback, bool gated,
                              const std::string& origin) {
  std::string hf = json_value<std::string>(j, key, fallback, origin + "/config.json");
  if (hf == "gelu_pytorch_tanh" && !gated) hf = activation_hf_name(Activation::Gelu);
  std::vector<std::string> known;
  for (std::string_view name : activation_names()) {
    const Activation a = parse_activation(name);
    if (activation_gated(a) != gated) continue;
    if (activation_hf_name(a) == hf) return a;
    known.push_back(fmt::format("{} ({})", activation_hf_name(a), name));
  }
  throw Error(fmt::format("{}: config.json '{}' is \"{}\": fp8lm's {} takes {}", origin, key, hf,
                          gated ? "gated MLP" : "MLP", fmt::join(known, ", ")));
}

GPTConfig config_from_hf(const Json& j, HfArchitecture a, const std::string& origin) {
  GPTConfig m;
  const std::string where = origin + "/config.json";
  const auto eps_rule = "fp8lm's norms use 1e-5";
  if (a == HfArchitecture::Gpt2) {
    m.vocab = field(j, "vocab_size", origin);
    m.seq_len = field(j, "n_positions", origin);
    m.d_model = field(j, "n_embd", origin);
    m.n_layers = field(j, "n_layer", origin);
    m.n_heads = field(j, "n_head", origin);
    // 4 x n_embd by default (saturated: a width that large is refused by the model's check).
    m.ffn = field_or(j, "n_inner", std::min(m.d_model, INT64_MAX / 4) * 4, origin);
    m.activation = activation_from_hf(j, "activation_function", "gelu_new", false, origin);
    require(j, "layer_norm_epsilon", kHfNormEps, origin, eps_rule);
    require(j, "scale_attn_weights", true, origin, "fp8lm scales scores by 1/sqrt(head size)");
    require(j, "scale_attn_by_inverse_layer_idx", false, origin, "fp8lm has no such scaling");
    require(j, "tie_word_embeddings", true, origin, "GPT2LMHeadModel's head is tied");
    return m;
  }
  m.vocab = field(j, "vocab_size", origin);
  m.seq_len = field(j, "max_position_embeddings", origin);
  m.d_model = field(j, "hidden_size", origin);
  m.n_layers = field(j, "num_hidden_layers", origin);
  m.n_heads = field(j, "num_attention_heads", origin);
  m.n_kv_heads = field_or(j, "num_key_value_heads", m.n_heads, origin);
  m.ffn = field(j, "intermediate_size", origin);
  m.activation = activation_from_hf(j, "hidden_act", "silu", true, origin);
  m.normalization = Normalization::RMSNorm;
  m.rope_theta = json_value<double>(j, "rope_theta", 10000.0, where);
  m.bias = false;
  m.tied_head = json_value<bool>(j, "tie_word_embeddings", false, where);
  require(j, "rms_norm_eps", kHfNormEps, origin, eps_rule);
  require(j, "rope_scaling", Json(), origin, "fp8lm has plain rotary embeddings");
  require(j, "attention_bias", false, origin, "fp8lm's Llama blocks have no biases");
  require(j, "mlp_bias", false, origin, "fp8lm's Llama blocks have no biases");
  require(j, "head_dim", m.n_heads > 0 ? m.d_model / m.n_heads : 0, origin,
          "fp8lm's head size is hidden_size / num_attention_heads");
  return m;
}

}  // namespace

HfConfig read_hf_config(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  const Json j = read_json_file(config_path, kJsonFileBytes);
  const std::string type =
      j.is_object() ? json_value<std::string>(j, "model_type", "", config_path) : "";
  if (type.empty())
    throw Error(fmt::format("{}: no model_type; not a Hugging Face model's config", config_path));
  if (type != "gpt2" && type != "llama") {
    throw Error(
        fmt::format("{}: model_type \"{}\" is not gpt2 or llama, the two architectures "
                    "fp8lm imports",
                    config_path, type));
  }
  const HfArchitecture a = type == "gpt2" ? HfArchitecture::Gpt2 : HfArchitecture::Llama;
  HfConfig out{a, config_from_hf(j, a, dir)};
  out.model.validate();
  return out;
}

}  // namespace fp8lm
