#include "kernels/types.h"

#include <fmt/format.h>

#include <string>

#include "fp8lm/error.h"
#include "kernels/activation_ops.h"

namespace fp8lm {
namespace {

// "a, b or c".
std::string choice_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ").append(names[i]);
  return out;
}

}  // namespace

std::string_view activation_name(Activation a) {
  switch (a) {
#define FP8LM_ACTIVATION_NAME(e, name, hf_name) \
  case Activation::e:                           \
    return name;
    FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_NAME)
#undef FP8LM_ACTIVATION_NAME
  }
  return "?";
}

std::string_view activation_hf_name(Activation a) {
  switch (a) {
#define FP8LM_ACTIVATION_HF_NAME(e, name, hf_name) \
  case Activation::e:                              \
    return hf_name;
    FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_HF_NAME)
#undef FP8LM_ACTIVATION_HF_NAME
  }
  return "?";
}

const std::vector<std::string_view>& activation_names() {
#define FP8LM_ACTIVATION_NAME(e, name, hf_name) name,
  static const std::vector<std::string_view> names = {FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_NAME)};
#undef FP8LM_ACTIVATION_NAME
  return names;
}

Activation parse_activation(std::string_view name) {
#define FP8LM_ACTIVATION_PARSE(e, n, hf_name) \
  if (name == n) return Activation::e;
  FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_PARSE)
#undef FP8LM_ACTIVATION_PARSE
  throw Error(
      fmt::format("unknown activation '{}' (expected {})", name, choice_list(activation_names())));
}

bool activation_gated(Activation a) {
  return with_activation(a, [](auto op) { return decltype(op)::gated; });
}

int64_t activation_input_width(Activation a, int64_t ffn) {
  return activation_gated(a) ? 2 * ffn : ffn;
}

std::string_view normalization_name(Normalization n) {
  return n == Normalization::LayerNorm ? "layernorm" : "rmsnorm";
}

Normalization parse_normalization(std::string_view name) {
  if (name == "layernorm") return Normalization::LayerNorm;
  if (name == "rmsnorm") return Normalization::RMSNorm;
  throw Error(fmt::format("unknown normalization '{}' (expected layernorm or rmsnorm)", name));
}

}  // namespace fp8lm
