#include "fp8/fp8_block_quantize.h"

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
  // The grid holds scales until the end: a block's scale_inv is scales_to_inverses' 1 / scale.
  const Isa isa = best_isa();
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
