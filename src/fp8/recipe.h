#pragma once
// FP8 recipes, with Transformer Engine's names, fields and defaults (docs/reference/numerics.md).
#include <string>
#include <string_view>
#include <vector>

#include "core/fp8_dtype.h"
#include "fp8lm/recipe.h"

namespace fp8lm {

enum class Direction { Forward, Backward };

constexpr DType tensor_format(Format recipe_format, Direction dir) {
  return recipe_format == Format::Hybrid && dir == Direction::Backward ? DType::E5M2 : DType::E4M3;
}

std::string_view format_name(Format f);
std::string_view scaling_kind_name(ScalingKind k);   // "delayed" | "current" | "block" | ...
std::vector<std::string_view> scaling_kind_names();  // every recipe's, in the enum's order
// One line naming the recipe and its settings (summary.json, the training banner); the
// block-scaled recipes say "emulated": their GEMMs are BF16 GEMMs of exactly decoded operands,
// unless native_gemms (the backend multiplies the codes: Backend::block_scaled_gemms).
std::string recipe_description(const Fp8Recipe& r, bool native_gemms = false);
// Throws Error naming the recipes.
ScalingKind parse_scaling_kind(std::string_view name);
std::string_view amax_compute_algo_name(AmaxComputeAlgo a);  // "max" | "most_recent"
// Parsers throw Error with the accepted names; "e5m2" is rejected with the reason.
Format parse_format(std::string_view name);
AmaxComputeAlgo parse_amax_compute_algo(std::string_view name);

}  // namespace fp8lm
