#pragma once
// MXFP8 quantization (TE's MXFP8BlockScaling): one E8M0 scale per 32 consecutive values, the
// values cast to E4M3 (or E5M2) after division by it. A GEMM reads its operands along K, so a
// tensor has two copies: row-wise (blocks of 32 along each row) and column-wise (blocks of 32
// down each column), each quantized from the high-precision tensor, never one from the other
// (TE docs, features/low_precision_training/mxfp8). The *_reference functions are the plain
// scalar twins; the others run each block through an ISA's vectorized amax and cast
// (fp8/quantize.h) and give the same bits.
//
// Per block (TE: transformer_engine/common/cast/mxfp8/ and common/utils.cuh):
//   amax  = max |x| over the block, NaN left out (fmaxf);
//   scale = e8m0_encode_round_up(amax * (1 / max)), the product in FP32 (max_norm_rcp);
//   code  = cast(x * e8m0_reciprocal(scale)), round to nearest even, saturating.
// A last block shorter than 32 (a row or column whose length is not a multiple of 32) is a
// block of the values it has.
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8/block_grid.h"
#include "fp8/quantize.h"

namespace fp8lm {

inline constexpr int64_t kMxBlock = 32;

// Blocks along a dimension of n values.
constexpr int64_t mx_blocks(int64_t n) {
  return (n + kMxBlock - 1) / kMxBlock;
}

// x is [rows, cols] row-major; codes are [rows, cols] in the same layout. Row-wise scales are
// [rows, mx_blocks(cols)]; column-wise scales are [mx_blocks(rows), cols].
void mxfp8_quantize_rowwise(Isa isa, uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                            int64_t cols, DType format);
void mxfp8_quantize_columnwise(Isa isa, uint8_t* codes, uint8_t* scales, const float* x,
                               int64_t rows, int64_t cols, DType format);
void mxfp8_quantize_rowwise_reference(uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                                      int64_t cols, DType format);
void mxfp8_quantize_columnwise_reference(uint8_t* codes, uint8_t* scales, const float* x,
                                         int64_t rows, int64_t cols, DType format);

// As the quantizers above on a grid of 1x32 or 32x1 blocks, also writing the GEMM operand
// (fp8/block_cast.h): decode(code) x 2^(scale - 127) in BF16, from each row's codes as they are
// made (fp8_cast_to_bf16). The best ISA this CPU runs.
void mxfp8_quantize_to_bf16(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                            const BlockGrid& g, DType format);

// One block of n contiguous values (any n), the scalar twin: writes the codes, returns the
// E8M0 scale (what `fp8lm fp8 encode --block` shows).
uint8_t mxfp8_quantize_block(uint8_t* codes, const float* x, int64_t n, DType format);

// y = decode(code) * 2^(scale - 127): the values a GEMM multiplies.
void mxfp8_dequantize_rowwise(float* y, const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, DType format);
void mxfp8_dequantize_columnwise(float* y, const uint8_t* codes, const uint8_t* scales,
                                 int64_t rows, int64_t cols, DType format);

}  // namespace fp8lm
