#pragma once
// How a GEMM runs: FP8 codes with scale_invs, BF16, or FP32 operands; FP32 accumulation in
// every mode. The one place a run's precision becomes GEMM modes.
#include "core/precision.h"

namespace fp8lm {

enum class GemmMode { Fp32, Bf16, Fp8 };

// The Linears' GEMMs at a resolved precision (Auto is resolved before: it maps to Fp32).
constexpr GemmMode gemm_mode(Precision p) {
  return p == Precision::Fp8    ? GemmMode::Fp8
         : p == Precision::Bf16 ? GemmMode::Bf16
                                : GemmMode::Fp32;
}

}  // namespace fp8lm
