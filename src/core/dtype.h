#pragma once
// The element types a tensor can hold, one enum for every layer: checkpoints (safetensors'
// names), kernel descriptors (a GEMM operand, a producer's output, a block cast's codes), the
// FP8 recipes' formats (E4M3, E5M2; NVFP4's E2M1 codes and MXFP8's E8M0 scales) and the CUDA
// backend. Each format's codec and limits are in core/fp8_dtype.h, its reference spec in
// core/minifloat.h.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8lm {

enum class DType : uint8_t { F32, BF16, E4M3, E5M2, I64, U8, F16, E2M1, E8M0 };

// One table (dtype.cpp) gives each its names and size.
// safetensors' names: "F32", "BF16", "F8_E4M3", "F8_E5M2", "I64", "U8", "F16"; E2M1 and E8M0
// ("E2M1", "E8M0") are stored one code per byte as U8 tensors.
std::string_view dtype_name(DType d);
// The lowercase name flags and messages use: "fp32", "bf16", "e4m3", "e5m2", "e2m1", "e8m0".
std::string_view dtype_short_name(DType d);
size_t dtype_size(DType d);
// A short name in any case; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view short_name);

constexpr bool is_fp8(DType d) {
  return d == DType::E4M3 || d == DType::E5M2;
}

}  // namespace fp8lm
