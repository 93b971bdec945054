#include "kernels/types.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::Gelu:
      return "gelu";
    case Activation::Relu:
      return "relu";
    case Activation::Swiglu:
      return "swiglu";
  }
  return "?";
}

Activation parse_activation(std::string_view name) {
  for (Activation a : {Activation::Gelu, Activation::Relu, Activation::Swiglu})
    if (name == activation_name(a)) return a;
  throw Error(fmt::format("unknown activation '{}' (expected gelu, relu or swiglu)", name));
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
