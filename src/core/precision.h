#pragma once
// The precision policy of docs/reference/numerics.md: what `--precision auto` picks on a
// device, and whether an explicit request can run there.
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu_features.h"
#include "fp8lm/precision.h"

namespace fp8lm {

std::string_view precision_name(Precision p);      // "auto", "fp8", "bf16", "fp32"
Precision parse_precision(std::string_view name);  // throws Error listing the choices
std::vector<std::string_view> precision_names();

// CPU: every precision runs; fp8 is always emulated, bf16 is native with AVX512-BF16 or AMX.
// auto -> bf16 where native, else fp32.
PrecisionChoice resolve_cpu_precision(Precision requested, const CpuFeatures& cpu);

// CUDA: fp8 needs compute capability >= 8.9, bf16 >= 8.0. auto picks the best; an explicit
// request the GPU cannot do throws Error (never a silent downgrade).
PrecisionChoice resolve_cuda_precision(Precision requested, int cc_major, int cc_minor);

}  // namespace fp8lm
