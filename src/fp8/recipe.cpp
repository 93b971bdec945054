#include "fp8/recipe.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

void DelayedScaling::validate() const {
  if (amax_history_len < 1 || amax_history_len > kMaxAmaxHistoryLen) {
    throw Error(fmt::format("amax_history_len {} is out of range (1 to {})", amax_history_len,
                            kMaxAmaxHistoryLen));
  }
  if (margin < 0) throw Error(fmt::format("margin {} is negative", margin));
}

void CurrentScaling::validate() const {
  if (margin < 0) throw Error(fmt::format("margin {} is negative", margin));
}

std::string_view format_name(Format f) {
  return f == Format::E4M3 ? "e4m3" : "hybrid";
}

std::string_view amax_compute_algo_name(AmaxComputeAlgo a) {
  return a == AmaxComputeAlgo::Max ? "max" : "most_recent";
}

Format parse_format(std::string_view name) {
  if (name == "e4m3" || name == "E4M3") return Format::E4M3;
  if (name == "hybrid" || name == "HYBRID") return Format::Hybrid;
  if (name == "e5m2" || name == "E5M2") {
    throw Error(
        "fp8 format e5m2 is not a recipe: gradients need E5M2's range but forward "
        "tensors need E4M3's precision; use hybrid");
  }
  throw Error(fmt::format("unknown fp8 format '{}' (expected e4m3 or hybrid)", name));
}

AmaxComputeAlgo parse_amax_compute_algo(std::string_view name) {
  if (name == "max") return AmaxComputeAlgo::Max;
  if (name == "most_recent") return AmaxComputeAlgo::MostRecent;
  throw Error(fmt::format("unknown amax compute algo '{}' (expected max or most_recent)", name));
}

}  // namespace fp8lm
