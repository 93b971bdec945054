#include "core/precision.h"

#include <fmt/format.h>

#include "core/enum_names.h"
#include "fp8lm/error.h"

namespace fp8lm {

namespace {
constexpr EnumNames<Precision, 4> kPrecisions{"precision", {"auto", "fp8", "bf16", "fp32"}};
}  // namespace

std::string_view precision_name(Precision p) {
  return kPrecisions.name(p);
}

Precision parse_precision(std::string_view name) {
  return kPrecisions.parse(name);
}

std::vector<std::string_view> precision_names() {
  return kPrecisions.choices();
}

std::string PrecisionChoice::label() const {
  return emulated ? fmt::format("{} (emulated)", precision_name(precision))
                  : std::string(precision_name(precision));
}

PrecisionChoice resolve_cpu_precision(Precision requested, const CpuFeatures& cpu) {
  const bool bf16_native = has_native_bf16(cpu);
  const char* bf16_hw = cpu.amx_bf16 ? "AMX-BF16" : "AVX512-BF16";
  switch (requested) {
    case Precision::Fp8:
      // The GEMMs multiply decoded values, exact in FP32 on either engine (doctor names it).
      return {Precision::Fp8, true,
              "no FP8 hardware on CPU: FP8 emulated exactly, GEMMs on the decoded values"};
    case Precision::Bf16:
      return {Precision::Bf16, !bf16_native,
              bf16_native ? fmt::format("{} present", bf16_hw)
                          : std::string("no AVX512-BF16 or AMX: BF16 emulated in FP32")};
    case Precision::Fp32:
      return {Precision::Fp32, false, "requested"};
    case Precision::Auto:
      break;
  }
  if (bf16_native) {
    return {Precision::Bf16, false,
            fmt::format("fp8 has no CPU hardware (would be emulated); {} present", bf16_hw)};
  }
  return {Precision::Fp32, false, "fp8 has no CPU hardware; no AVX512-BF16 or AMX for bf16"};
}

PrecisionChoice resolve_cuda_precision(Precision requested, int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  const std::string cc_text = fmt::format("compute capability {}.{}", cc_major, cc_minor);
  const bool fp8_ok = cc >= 89, bf16_ok = cc >= 80;
  switch (requested) {
    case Precision::Fp8:
      if (!fp8_ok)
        throw Error(fmt::format("precision fp8 needs compute capability >= 8.9; this GPU has {}.{}",
                                cc_major, cc_minor));
      return {Precision::Fp8, false, fmt::format("{} >= 8.9", cc_text)};
    case Precision::Bf16:
      if (!bf16_ok)
        throw Error(
            fmt::format("precision bf16 needs compute capability >= 8.0; this GPU has {}.{}",
                        cc_major, cc_minor));
      return {Precision::Bf16, false, fmt::format("{} >= 8.0", cc_text)};
    case Precision::Fp32:
      return {Precision::Fp32, false, "requested"};
    case Precision::Auto:
      break;
  }
  if (fp8_ok) return {Precision::Fp8, false, fmt::format("{} >= 8.9: FP8 tensor cores", cc_text)};
  if (bf16_ok)
    return {Precision::Bf16, false, fmt::format("fp8 unavailable: {} < 8.9; using bf16", cc_text)};
  return {Precision::Fp32, false,
          fmt::format("fp8 and bf16 unavailable: {} < 8.0; using fp32", cc_text)};
}

}  // namespace fp8lm
