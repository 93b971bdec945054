#include "fp8/mx_quantize.h"

#include <algorithm>
#include <cmath>

#include "core/e8m0.h"

namespace fp8lm {

namespace {

// A block's scale from its amax: TE's max_norm_rcp is 1/max rounded to FP32 once, then
// multiplied (not a division).
uint8_t block_scale(float amax, Fp8Format format) {
  const auto max_rcp = static_cast<float>(1.0 / static_cast<double>(fp8_max(format)));
  return e8m0_encode_round_up(amax * max_rcp);
}

// One block of n values at x[0], x[stride], ...: its scale, and each value's code.
uint8_t quantize_block(uint8_t* codes, const float* x, int64_t n, int64_t stride,
                       Fp8Format format) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i * stride]));
  const uint8_t scale = block_scale(amax, format);
  const float multiplier = e8m0_reciprocal(scale);
  for (int64_t i = 0; i < n; ++i)
    codes[i * stride] = fp8_encode(x[i * stride] * multiplier, format);
  return scale;
}

// The same block, contiguous, through an ISA's kernels: its amax (NaN left out, as fmaxf) and
// the cast at the block's multiplier (x * multiplier: the scalar twin's product).
uint8_t quantize_block(Isa isa, uint8_t* codes, const float* x, int64_t n, Fp8Format format) {
  const uint8_t scale = block_scale(absmax(isa, x, n), format);
  quantize(isa, codes, x, n, e8m0_reciprocal(scale), format);
  return scale;
}

// Each row's blocks of 32 (the last one shorter where cols is not a multiple of 32) through
// quantize(codes, x, n), which returns the block's scale.
template <class QuantizeBlock>
void rowwise_blocks(uint8_t* codes, uint8_t* scales, const float* x, int64_t rows, int64_t cols,
                    QuantizeBlock quantize_one) {
  const int64_t blocks = mx_blocks(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = r * cols + b * kMxBlock;
      scales[r * blocks + b] =
          quantize_one(codes + at, x + at, std::min(kMxBlock, cols - b * kMxBlock));
    }
  }
}

}  // namespace

uint8_t mxfp8_quantize_block(uint8_t* codes, const float* x, int64_t n, Fp8Format format) {
  return quantize_block(codes, x, n, 1, format);
}

void mxfp8_quantize_rowwise(uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                            int64_t cols, Fp8Format format) {
  mxfp8_quantize_rowwise(best_isa(), codes, scales, x, rows, cols, format);
}

void mxfp8_quantize_columnwise(uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                               int64_t cols, Fp8Format format) {
  mxfp8_quantize_columnwise(best_isa(), codes, scales, x, rows, cols, format);
}

void mxfp8_quantize_rowwise(Isa isa, uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                            int64_t cols, Fp8Format format) {
  rowwise_blocks(codes, scales, x, rows, cols, [&](uint8_t* c, const float* v, int64_t n) {
    return quantize_block(isa, c, v, n, format);
  });
}

void mxfp8_quantize_columnwise(Isa isa, uint8_t* codes, uint8_t* scales, const float* x,
                               int64_t rows, int64_t cols, Fp8Format format) {
  // Each column's block gathered into a contiguous run, quantized, and its codes put back.
  float block[kMxBlock];
  uint8_t block_codes[kMxBlock];
  for (int64_t b = 0; b < mx_blocks(rows); ++b) {
    const int64_t n = std::min(kMxBlock, rows - b * kMxBlock);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t at = b * kMxBlock * cols + c;
      for (int64_t i = 0; i < n; ++i) block[i] = x[at + i * cols];
      scales[b * cols + c] = quantize_block(isa, block_codes, block, n, format);
      for (int64_t i = 0; i < n; ++i) codes[at + i * cols] = block_codes[i];
    }
  }
}

void mxfp8_quantize_rowwise_reference(uint8_t* codes, uint8_t* scales, const float* x, int64_t rows,
                                      int64_t cols, Fp8Format format) {
  rowwise_blocks(codes, scales, x, rows, cols, [&](uint8_t* c, const float* v, int64_t n) {
    return mxfp8_quantize_block(c, v, n, format);
  });
}

void mxfp8_quantize_columnwise_reference(uint8_t* codes, uint8_t* scales, const float* x,
                                         int64_t rows, int64_t cols, Fp8Format format) {
  for (int64_t b = 0; b < mx_blocks(rows); ++b) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t at = b * kMxBlock * cols + c;
      scales[b * cols + c] =
          quantize_block(codes + at, x + at, std::min(kMxBlock, rows - b * kMxBlock), cols, format);
    }
  }
}

void mxfp8_dequantize_rowwise(float* y, const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Format format) {
  const int64_t blocks = mx_blocks(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] =
          fp8_decode(codes[r * cols + c], format) * e8m0_decode(scales[r * blocks + c / kMxBlock]);
}

void mxfp8_dequantize_columnwise(float* y, const uint8_t* codes, const uint8_t* scales,
                                 int64_t rows, int64_t cols, Fp8Format format) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] =
          fp8_decode(codes[r * cols + c], format) * e8m0_decode(scales[(r / kMxBlock) * cols + c]);
}

}  // namespace fp8lm
