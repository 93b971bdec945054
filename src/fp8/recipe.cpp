#include "fp8/recipe.h"

#include <fmt/format.h>

#include "core/enum_names.h"
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

namespace {
constexpr EnumNames<ScalingKind, 5> kScalingKinds{
    "recipe", {"delayed", "current", "block", "mxfp8", "nvfp4"}};
constexpr EnumNames<AmaxComputeAlgo, 2> kAmaxAlgos{"amax compute algo", {"max", "most_recent"}};
}  // namespace

std::string_view scaling_kind_name(ScalingKind k) {
  return kScalingKinds.name(k);
}

ScalingKind parse_scaling_kind(std::string_view name) {
  return kScalingKinds.parse(name);
}

std::vector<std::string_view> scaling_kind_names() {
  return kScalingKinds.choices();
}

std::string recipe_description(const Fp8Recipe& r, bool native_gemms) {
  const auto on = [](bool v) { return v ? "on" : "off"; };
  switch (r.kind) {
    case ScalingKind::Delayed:
    case ScalingKind::Current: {
      const DelayedScaling& d = r.delayed;
      return fmt::format("{} {} margin={} amax_history_len={} amax_compute_algo={}",
                         scaling_kind_name(r.kind), format_name(d.format), d.margin,
                         d.amax_history_len, amax_compute_algo_name(d.amax_compute_algo));
    }
    case ScalingKind::Block:
      return fmt::format(
          "block e4m3 1x128 tiles, 128x128 weight blocks, fp32 scales power_2_scale={} "
          "amax_epsilon={} ({})",
          r.block.power_2_scale, r.block.amax_epsilon,
          native_gemms ? "native: cuBLASLt block-scaled GEMMs" : "emulated");
    case ScalingKind::Mxfp8:
      return "mxfp8 e4m3 1x32 blocks, e8m0 scales (emulated)";
    case ScalingKind::Nvfp4:
      return fmt::format(
          "nvfp4 e2m1 1x16 blocks, e4m3 scales + fp32 tensor scale, rht={} "
          "stochastic_rounding={} 2d_weights={} (emulated)",
          on(!r.nvfp4.disable_rht), on(!r.nvfp4.disable_stochastic_rounding),
          on(!r.nvfp4.disable_2d_quantization));
  }
  return "?";
}

std::string_view amax_compute_algo_name(AmaxComputeAlgo a) {
  return kAmaxAlgos.name(a);
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
  return kAmaxAlgos.parse(name);
}

}  // namespace fp8lm
