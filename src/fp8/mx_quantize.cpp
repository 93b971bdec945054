#include "fp8/mx_quantize.h"

#include <algorithm>

#include "core/e8m0.h"
#include "fp8/block_grid.h"
#include "fp8/quantize_isa.h"

namespace fp8lm {

namespace {

// TE's MX rule: the scale from amax * (1/max), 1/max rounded to FP32 once (max_norm_rcp, a
// product, not a division); each value multiplied by the scale's reciprocal (exp2f_rcp).
struct MxRule {
  DType format;
  uint8_t scale(float amax) const {
    const auto max_rcp = static_cast<float>(1.0 / static_cast<double>(fp8_max(format)));
    return e8m0_encode_round_up(amax * max_rcp);
  }
  float multiplier(uint8_t scale) const { return e8m0_reciprocal(scale); }
};

constexpr BlockGrid rowwise(int64_t rows, int64_t cols) {
  return {rows, cols, 1, kMxBlock};
}
constexpr BlockGrid columnwise(int64_t rows, int64_t cols) {
  return {rows, cols, kMxBlock, 1};
}

void quantize_mx(Isa isa, uint8_t* codes, uint8_t* scales, const float* x, const BlockGrid& g,
                 DType format) {
  quantize_blocks(isa, codes, scales, x, g, MxRule{format},
                  [&](uint8_t* c, const float* v, int64_t n, float m, int64_t) {
                    quantize(isa, c, v, n, m, format);
                  });
}

void quantize_mx_reference(uint8_t* codes, uint8_t* scales, const float* x, const BlockGrid& g,
                           DType format) {
  quantize_blocks_reference(codes, scales, x, g, MxRule{format},
                            [&](float v, int64_t) { return fp8_encode(v, format); });
}

}  // namespace

void mxfp8_quantize_to_bf16(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                            const BlockGrid& g, DType format) {
  const Isa isa = best_isa();
  if (isa == Isa::Avx512 && g.block_rows == 1 && g.block_cols == kMxBlock) {
    isa::mxfp8_rows_avx512(codes, scales, operand, x, g.rows, g.cols, format);
    return;
  }
  if (isa == Isa::Avx512 && g.block_rows == kMxBlock && g.block_cols == 1) {
    for (int64_t r0 = 0; r0 < g.rows; r0 += kMxBlock) {
      isa::mxfp8_columns_avx512(codes ? codes + r0 * g.cols : nullptr,
                                scales + r0 / kMxBlock * g.cols, operand + r0 * g.cols,
                                x + r0 * g.cols, std::min(kMxBlock, g.rows - r0), g.cols, format);
    }
    return;
  }
  quantize_blocks_to_bf16(
      isa, codes, scales, operand, x, g, MxRule{format}, [](uint8_t s) { return e8m0_decode(s); },
      fp8_cast_row(isa, format));
}

uint8_t mxfp8_quantize_block(uint8_t* codes, const float* x, int64_t n, DType format) {
  uint8_t scale = 0;
  quantize_mx_reference(codes, &scale, x, {1, n, 1, n}, format);
  return scale;
}

void mxfp8_quantize_rowwise(Isa isa, uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                            int64_t cols, DType format) {
  quantize_mx(isa, codes, scales, x, rowwise(rows, cols), format);
}

void mxfp8_quantize_columnwise(Isa isa, uint8_t* codes, uint8_t* scales, const float* x,
                               int64_t rows, int64_t cols, DType format) {
  quantize_mx(isa, codes, scales, x, columnwise(rows, cols), format);
}

void mxfp8_quantize_rowwise_reference(uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                                      int64_t cols, DType format) {
  quantize_mx_reference(codes, scales, x, rowwise(rows, cols), format);
}

void mxfp8_quantize_columnwise_reference(uint8_t* codes, uint8_t* scales, const float* x,
                                         int64_t rows, int64_t cols, DType format) {
  quantize_mx_reference(codes, scales, x, columnwise(rows, cols), format);
}

void mxfp8_dequantize_rowwise(float* y, const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, DType format) {
  const int64_t blocks = mx_blocks(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] =
          fp8_decode(codes[r * cols + c], format) * e8m0_decode(scales[r * blocks + c / kMxBlock]);
}

void mxfp8_dequantize_columnwise(float* y, const uint8_t* codes, const uint8_t* scales,
                                 int64_t rows, int64_t cols, DType format) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] =
          fp8_decode(codes[r * cols + c], format) * e8m0_decode(scales[(r / kMxBlock) * cols + c]);
}

}  // namespace fp8lm
