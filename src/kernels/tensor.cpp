#include "kernels/tensor.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

DType producer_out_dtype(const ProducerOut& out, const char* op) {
  const int set = (out.y != nullptr) + (out.y8.data != nullptr) + (out.y16 != nullptr) +
                  (out.blocks.row != nullptr);
  if (set != 1) {
    throw Error(fmt::format(
        "{}: exactly one output (FP32, FP8, BF16 or block-scaled) must be given, got {}", op, set));
  }
  if (out.blocks.row != nullptr) {
    throw Error(
        fmt::format("{}: this backend does not cast block-scaled outputs as it makes them", op));
  }
  if (out.y != nullptr) return DType::F32;
  if (out.y16 != nullptr) return DType::BF16;
  if (out.y8.scale == nullptr) throw Error(fmt::format("{}: FP8 output without a scale", op));
  return out.y8.format;
}

}  // namespace fp8lm
