#pragma once
// TE's Float8BlockScaling (DeepSeek-V3's recipe): FP8 values with one FP32 scale per block,
// 1x128 tiles for activations and gradients (their row-wise copy 1x128, their column-wise copy
// 128x1, each quantized from the high-precision tensor) and 128x128 blocks for weights (one
// quantization serves both GEMM directions). The scale rule, TE's compute_scale_from_amax
// (transformer_engine/common/recipe/recipe_common.cuh, through compute_scale_from_types):
//   amax  = max(block amax, amax_epsilon);
//   scale = 1 when amax is 0, Inf or NaN; else max / amax (one FP32 division), and when that
//           overflows the input type's largest finite value (FP32: FLT_MAX);
//   power_2_scale: the scale's mantissa cleared (rounded down to a power of two, so scaled
//           values never exceed max and scale_inv is exact);
//   scale_inv = 1 / scale (what is stored, and what the GEMM multiplies by);
//   code  = cast(x * scale), round to nearest even, saturating (the CUDA fp8 conversion's
//           satfinite, as TE's kernels cast).
// TE's defaults: power_2_scale on, amax_epsilon 0 (recipe/__init__.py, QParams).
#include <cstdint>

#include "core/fp8_dtype.h"
#include "fp8/block_grid.h"
#include "fp8lm/recipe.h"  // BlockScalingParams

namespace fp8lm {

inline constexpr int64_t kFp8Block = 128;

// The blocks of each copy of a [rows, cols] tensor.
constexpr BlockGrid fp8_block_rowwise(int64_t rows, int64_t cols) {
  return {rows, cols, 1, kFp8Block};
}
constexpr BlockGrid fp8_block_columnwise(int64_t rows, int64_t cols) {
  return {rows, cols, kFp8Block, 1};
}
constexpr BlockGrid fp8_block_2d(int64_t rows, int64_t cols) {
  return {rows, cols, kFp8Block, kFp8Block};
}

// The scale a block with this amax is cast with (host and device: core/op_math.h).
FP8LM_OP float fp8_block_scale(float amax, DType format, const BlockScalingParams& params) {
  if (amax < params.amax_epsilon) amax = params.amax_epsilon;  // a NaN amax is kept (false)
  const uint32_t a = op_math::bits(amax) & 0x7fffffffu;
  if (a == 0 || a >= 0x7f800000u) return 1.0f;  // zero, Inf or NaN
  float scale = op_math::div(fp8_max(format), amax);
  if ((op_math::bits(scale) & 0x7fffffffu) == 0x7f800000u) scale = op_math::from_bits(0x7f7fffffu);
  // recipe_common.cuh: the mantissa bits masked off. scale >= 448 / FLT_MAX, a normal float,
  // so this is the power of two at or below it.
  if (params.power_2_scale) scale = op_math::from_bits(op_math::bits(scale) & 0xff800000u);
  return scale;
}

// codes [rows, cols] in x's layout; scale_inv one per block of g (grid order). Without an Isa,
// the best this CPU runs.
void fp8_block_quantize(uint8_t* codes, float* scale_inv, const float* x, const BlockGrid& g,
                        DType format, const BlockScalingParams& params);
void fp8_block_quantize(Isa isa, uint8_t* codes, float* scale_inv, const float* x,
                        const BlockGrid& g, DType format, const BlockScalingParams& params);
void fp8_block_quantize_reference(uint8_t* codes, float* scale_inv, const float* x,
                                  const BlockGrid& g, DType format,
                                  const BlockScalingParams& params);

// y = decode(code) * scale_inv of its block.
// fp8_block_quantize, also writing the GEMM operand (fp8/block_cast.h): decode(code) x the
// block's scale_inv in BF16, from each row's codes as they are made (fp8_cast_to_bf16).
void fp8_block_quantize_to_bf16(uint8_t* codes, float* scale_inv, bf16_t* operand, const float* x,
                                const BlockGrid& g, DType format, const BlockScalingParams& params);

void fp8_block_dequantize(float* y, const uint8_t* codes, const float* scale_inv,
                          const BlockGrid& g, DType format);

}  // namespace fp8lm
