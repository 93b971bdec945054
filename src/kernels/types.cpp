#include "kernels/types.h"

#include "core/enum_names.h"
#include "kernels/activation_ops.h"
#include "kernels/norm_ops.h"

namespace fp8lm {
namespace {

// The lists' names (and Hugging Face's for the activations), in each list's order, which is
// its enum's.
#define FP8LM_ONE(...) +1
constexpr size_t kActivationCount = 0 FP8LM_ACTIVATIONS(FP8LM_ONE);
constexpr EnumNames<Activation, kActivationCount> kActivations{
    "activation",
    {
#define FP8LM_ACTIVATION_NAME(e, name, hf_name) name,
        FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_NAME)
#undef FP8LM_ACTIVATION_NAME
    }};
constexpr EnumNames<Activation, kActivationCount> kHfActivations{
    "activation",
    {
#define FP8LM_ACTIVATION_HF_NAME(e, name, hf_name) hf_name,
        FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_HF_NAME)
#undef FP8LM_ACTIVATION_HF_NAME
    }};
constexpr EnumNames<Normalization, 0 FP8LM_NORMALIZATIONS(FP8LM_ONE)> kNormalizations{
    "normalization",
    {
#define FP8LM_NORMALIZATION_NAME(e, name) name,
        FP8LM_NORMALIZATIONS(FP8LM_NORMALIZATION_NAME)
#undef FP8LM_NORMALIZATION_NAME
    }};
#undef FP8LM_ONE

}  // namespace

std::string_view activation_name(Activation a) {
  return kActivations.name(a);
}

std::string_view activation_hf_name(Activation a) {
  return kHfActivations.name(a);
}

const std::vector<std::string_view>& activation_names() {
  static const std::vector<std::string_view> names = kActivations.choices();
  return names;
}

Activation parse_activation(std::string_view name) {
  return kActivations.parse(name);
}

bool activation_gated(Activation a) {
  return with_activation(a, [](auto op) { return decltype(op)::gated; });
}

int64_t activation_input_width(Activation a, int64_t ffn) {
  return activation_gated(a) ? 2 * ffn : ffn;
}

std::string_view normalization_name(Normalization n) {
  return kNormalizations.name(n);
}

Normalization parse_normalization(std::string_view name) {
  return kNormalizations.parse(name);
}

std::vector<std::string_view> normalization_names() {
  return kNormalizations.choices();
}

bool normalization_centred(Normalization n) {
  return with_normalization(n, [](auto op) { return decltype(op)::centred; });
}

}  // namespace fp8lm
