#include "kernels/types.h"

#include <fmt/format.h>

#include <iterator>
#include <string>

#include "fp8lm/error.h"
#include "kernels/activation_ops.h"
#include "kernels/norm_ops.h"

namespace fp8lm {
namespace {

// "a, b or c".
std::string choice_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ").append(names[i]);
  return out;
}

// FP8LM_ACTIVATIONS as a table: row i is enumerator i's, as the enum counts from 0 in the
// list's order.
struct ActivationNames {
  Activation a;
  std::string_view name, hf_name;
};
constexpr ActivationNames kActivations[] = {
#define FP8LM_ACTIVATION_ROW(e, name, hf_name) {Activation::e, name, hf_name},
    FP8LM_ACTIVATIONS(FP8LM_ACTIVATION_ROW)
#undef FP8LM_ACTIVATION_ROW
};

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kActivations); ++i)
    if (static_cast<size_t>(kActivations[i].a) != i) return false;
  return true;
}
static_assert(rows_in_enum_order());

const ActivationNames& row(Activation a) {
  const auto i = static_cast<size_t>(a);
  if (i >= std::size(kActivations)) throw Error(fmt::format("activation {} is not one", i));
  return kActivations[i];
}

}  // namespace

std::string_view activation_name(Activation a) {
  return row(a).name;
}

std::string_view activation_hf_name(Activation a) {
  return row(a).hf_name;
}

const std::vector<std::string_view>& activation_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const ActivationNames& r : kActivations) v.push_back(r.name);
    return v;
  }();
  return names;
}

Activation parse_activation(std::string_view name) {
  for (const ActivationNames& r : kActivations)
    if (r.name == name) return r.a;
  throw Error(
      fmt::format("unknown activation '{}' (expected {})", name, choice_list(activation_names())));
}

bool activation_gated(Activation a) {
  return with_activation(a, [](auto op) { return decltype(op)::gated; });
}

int64_t activation_input_width(Activation a, int64_t ffn) {
  return activation_gated(a) ? 2 * ffn : ffn;
}

namespace {

constexpr std::string_view kNormalizationNames[] = {
#define FP8LM_NORMALIZATION_NAME(e, name) name,
    FP8LM_NORMALIZATIONS(FP8LM_NORMALIZATION_NAME)
#undef FP8LM_NORMALIZATION_NAME
};

}  // namespace

std::string_view normalization_name(Normalization n) {
  const auto i = static_cast<size_t>(n);
  if (i >= std::size(kNormalizationNames))
    throw Error(fmt::format("normalization {} is not one", i));
  return kNormalizationNames[i];
}

Normalization parse_normalization(std::string_view name) {
  for (size_t i = 0; i < std::size(kNormalizationNames); ++i)
    if (kNormalizationNames[i] == name) return static_cast<Normalization>(i);
  const std::vector<std::string_view> names(std::begin(kNormalizationNames),
                                            std::end(kNormalizationNames));
  throw Error(fmt::format("unknown normalization '{}' (expected {})", name, choice_list(names)));
}

bool normalization_centred(Normalization n) {
  return with_normalization(n, [](auto op) { return decltype(op)::centred; });
}

}  // namespace fp8lm
