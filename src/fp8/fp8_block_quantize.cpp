#include "fp8/fp8_block_quantize.h"

#include <algorithm>
#include <vector>

#include "core/grown.h"
#include "fp8/quantize.h"
#include "fp8/quantize_isa.h"

namespace fp8lm {

namespace {

// The stored scale is scale_inv; the cast multiplies by scale, which 1 / scale_inv gives back
// exactly only for powers of two. So the rule keeps the scale itself and derives scale_inv.
struct BlockRule {
  DType format;
  BlockScalingParams params;
  // Returns the scale (kept as the block's "Scale" while quantizing; turned into scale_inv
  // after).
  float scale(float amax) const { return fp8_block_scale(amax, format, params); }
  float multiplier(float scale) const { return scale; }
};

void scales_to_inverses(float* scales, int64_t n) {
  for (int64_t i = 0; i < n; ++i) scales[i] = 1.0f / scales[i];
}

// Where no codes are kept, on AVX-512, blocks other than 1x128 (fp8_block_avx512.cpp casts
// those): a stripe of block rows' block amaxes in one sweep over its rows, then each row's
// operand in a second (the stripe still in cache), without quantize_blocks' run of products and
// spread of scales. The same arithmetic: fp8_round(x * scale) times 1 / scale, rounded to BF16.
// scales gets each block's scale (the caller inverts them). Column-wise blocks (block_cols 1)
// take each column's amax down the stripe and round with a multiplier and a scale per value; the
// others, one per run of block_cols values.
void operand_avx512(float* scales, bf16_t* operand, const float* x, const BlockGrid& g,
                    const BlockRule& rule) {
  const int64_t gc = g.grid_cols(), bw = g.block_cols;
  thread_local std::vector<float> storage;  // stripes run on several threads
  float* const amax = grown(storage, static_cast<size_t>(3 * gc));
  float* const mult = amax + gc;
  float* const inverse = mult + gc;
  for (int64_t r0 = 0; r0 < g.rows; r0 += g.block_rows) {
    const int64_t r1 = std::min(g.rows, r0 + g.block_rows);
    std::fill(amax, amax + gc, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * g.cols;
      if (bw == 1) {
        column_absmax(amax, row, g.cols);
      } else {
        row_block_absmax(Isa::Avx512, amax, row, g.cols, bw);
      }
    }
    float* stripe_scales = scales + r0 / g.block_rows * gc;
    for (int64_t b = 0; b < gc; ++b) {
      const float s = rule.scale(amax[b]);
      stripe_scales[b] = s;
      mult[b] = rule.multiplier(s);
      inverse[b] = 1.0f / s;
    }
    for (int64_t r = r0; r < r1; ++r)
      isa::fp8_round_blocks_to_bf16_avx512(operand + r * g.cols, x + r * g.cols, mult, inverse,
                                           g.cols, bw, rule.format);
  }
}

}  // namespace

void fp8_block_quantize(uint8_t* codes, float* scale_inv, const float* x, const BlockGrid& g,
                        DType format, const BlockScalingParams& params) {
  fp8_block_quantize(best_isa(), codes, scale_inv, x, g, format, params);
}

void fp8_block_quantize(Isa isa, uint8_t* codes, float* scale_inv, const float* x,
                        const BlockGrid& g, DType format, const BlockScalingParams& params) {
  quantize_blocks(isa, codes, scale_inv, x, g, BlockRule{format, params},
                  [&](uint8_t* c, const float* v, int64_t n, float m, int64_t) {
                    quantize(isa, c, v, n, m, format);
                  });
  scales_to_inverses(scale_inv, g.blocks());
}

void fp8_block_quantize_reference(uint8_t* codes, float* scale_inv, const float* x,
                                  const BlockGrid& g, DType format,
                                  const BlockScalingParams& params) {
  quantize_blocks_reference(codes, scale_inv, x, g, BlockRule{format, params},
                            [&](float v, int64_t) { return fp8_encode(v, format); });
  scales_to_inverses(scale_inv, g.blocks());
}

void fp8_block_quantize_to_bf16(uint8_t* codes, float* scale_inv, bf16_t* operand, const float* x,
                                const BlockGrid& g, DType format,
                                const BlockScalingParams& params) {
  // The grid holds scales until the end: a block's scale_inv is scales_to_inverses' 1 / scale
  // (the row-wise kernel's lanes divide as it does and store scale_inv).
  const Isa isa = best_isa();
  if (isa == Isa::Avx512 && !codes && g.block_rows == 1 && g.block_cols == kFp8Block &&
      params.power_2_scale) {
    return isa::fp8_block_rows_avx512(scale_inv, operand, x, g.rows, g.cols, format,
                                      params.amax_epsilon);
  }
  if (isa == Isa::Avx512 && !codes) {
    operand_avx512(scale_inv, operand, x, g, BlockRule{format, params});
    return scales_to_inverses(scale_inv, g.blocks());
  }
  quantize_blocks_to_bf16(
      isa, codes, scale_inv, operand, x, g, BlockRule{format, params},
      [](float s) { return 1.0f / s; }, fp8_cast_row(isa, format));
  scales_to_inverses(scale_inv, g.blocks());
}

void fp8_block_dequantize(float* y, const uint8_t* codes, const float* scale_inv,
                          const BlockGrid& g, DType format) {
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c)
      y[r * g.cols + c] = fp8_decode(codes[r * g.cols + c], format) * scale_inv[g.block_of(r, c)];
}

}  // namespace fp8lm
