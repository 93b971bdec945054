#pragma once
// The element types a tensor can hold, one enum for every layer: checkpoints (safetensors'
// names), kernel descriptors (a GEMM operand, a producer's output) and the CUDA backend.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/fp8_dtype.h"

namespace fp8lm {

enum class DType : uint8_t { F32, BF16, E4M3, E5M2, I64, U8 };

// safetensors' names: "F32", "BF16", "F8_E4M3", "F8_E5M2", "I64", "U8".
std::string_view dtype_name(DType d);
size_t dtype_size(DType d);

constexpr bool is_fp8(DType d) {
  return d == DType::E4M3 || d == DType::E5M2;
}
constexpr DType fp8_dtype(Fp8Format f) {
  return f == Fp8Format::E4M3 ? DType::E4M3 : DType::E5M2;
}
// The FP8 format of an FP8 dtype (E4M3 for anything else: callers check is_fp8 first).
constexpr Fp8Format fp8_format_of(DType d) {
  return d == DType::E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3;
}

}  // namespace fp8lm
