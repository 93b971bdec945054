#include "fp8/nvfp4_quantize.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "core/fp8_dtype.h"
#include "core/grown.h"
#include "fp8/hadamard.h"
#include "fp8/quantize_isa.h"

namespace fp8lm {

namespace {

constexpr float kFloatMax = std::numeric_limits<float>::max();

struct Nvfp4Rule {
  float global_encode;
  uint8_t scale(float amax) const {
    return fp8_encode(amax * (global_encode * (1.0f / kE2M1Max)), DType::E4M3);
  }
  float multiplier(uint8_t block) const {
    // fmin's result (an Inf or NaN reciprocal gives the largest float) without its libm call,
    // once per 16 values.
    const float m = 1.0f / Nvfp4BlockScales{global_encode, block}.decode();
    return m < kFloatMax ? m : kFloatMax;
  }
  // scale() and multiplier() of n blocks: the encodes through the ISA's FP8 cast (at scale 1,
  // saturating: fp8_encode's bits), the rest in loops the compiler vectorizes.
  void scale_row(Isa isa, uint8_t* scales, float* mult, const float* amax, int64_t n) const {
    thread_local std::vector<float> scaled_storage;
    float* scaled = grown(scaled_storage, static_cast<size_t>(n));
    const float k = global_encode * (1.0f / kE2M1Max);
    for (int64_t i = 0; i < n; ++i) scaled[i] = amax[i] * k;
    quantize(isa, scales, scaled, n, 1.0f, DType::E4M3);
    const float* table = fp8_decode_table(DType::E4M3).data();
    const float inv_global = 1.0f / global_encode;
    for (int64_t i = 0; i < n; ++i) {
      const float m = 1.0f / (table[scales[i]] * inv_global);
      mult[i] = m < kFloatMax ? m : kFloatMax;
    }
  }
};

}  // namespace

float Nvfp4BlockScales::block() const {
  return fp8_decode(block_e4m3, DType::E4M3);
}

float Nvfp4BlockScales::decode() const {
  return block() * (1.0f / global_encode);
}

Nvfp4BlockScales nvfp4_quantize_block(uint8_t* codes, const float* x, int64_t n,
                                      float global_amax) {
  Nvfp4BlockScales s;
  s.global_encode = nvfp4_global_encode_scale(global_amax);
  nvfp4_quantize_reference(codes, &s.block_e4m3, x, {1, n, 1, n}, global_amax);
  return s;
}

void nvfp4_quantize_to_bf16(uint8_t* codes, uint8_t* block_scales, bf16_t* operand, const float* x,
                            const BlockGrid& g, float global_amax, const uint32_t* sr_key,
                            int64_t first_index, bool rht) {
  const Isa isa = best_isa();
  const float global_encode = nvfp4_global_encode_scale(global_amax);
  if (isa == Isa::Avx512 && g.block_rows == 1 && g.block_cols == kNvfp4Block && !rht) {
    isa::nvfp4_rows_avx512(codes, block_scales, operand, x, g.rows, g.cols, global_encode, sr_key,
                           first_index);
    return;
  }
  // Stripes of 16 rows: the column-wise copy's 16x1 blocks (the transform taken as they load)
  // and the weights' 16x16 ones. The stripe's scales start at its block row.
  const bool columns = g.block_cols == 1, tiles = g.block_cols == kNvfp4Block && !rht;
  if (isa == Isa::Avx512 && g.block_rows == kNvfp4Block && (columns || tiles)) {
    for (int64_t r0 = 0; r0 < g.rows; r0 += kNvfp4Block) {
      const int64_t at = r0 * g.cols, nr = std::min(kNvfp4Block, g.rows - r0);
      uint8_t* stripe_codes = codes ? codes + at : nullptr;
      uint8_t* stripe_scales = block_scales + r0 / kNvfp4Block * g.grid_cols();
      if (columns) {
        isa::nvfp4_columns_avx512(stripe_codes, stripe_scales, operand + at, x + at, nr, g.cols,
                                  global_encode, rht, sr_key, first_index + at);
      } else {
        isa::nvfp4_tiles_avx512(stripe_codes, stripe_scales, operand + at, x + at, nr, g.cols,
                                global_encode, sr_key, first_index + at);
      }
    }
    return;
  }
  // Elsewhere the transform into a buffer, then quantize_blocks' passes over it.
  const auto n = static_cast<size_t>(g.rows * g.cols);
  thread_local std::vector<float> rotated;
  thread_local std::vector<uint8_t> kept;
  if (rht) {
    float* y = grown(rotated, n);
    rht16_rows(y, x, g.rows, g.cols);
    x = y;
  }
  if (!codes) {
    codes = grown(kept, n);
  }
  const float* e4m3 = fp8_decode_table(DType::E4M3).data();
  quantize_blocks_to_bf16(
      isa, codes, block_scales, operand, x, g, Nvfp4Rule{global_encode},
      [e4m3](uint8_t s) { return e4m3[s]; },
      [&](uint8_t* c, bf16_t* out, const float* v, const float* s, int64_t n_row, int64_t first) {
        e2m1_cast_to_bf16(isa, c, out, v, s, n_row, sr_key, first_index + first);
      });
}

void nvfp4_quantize(Isa isa, uint8_t* codes, uint8_t* block_scales, const float* x,
                    const BlockGrid& g, float global_amax, const uint32_t* sr_key,
                    int64_t first_index) {
  quantize_blocks(isa, codes, block_scales, x, g, Nvfp4Rule{nvfp4_global_encode_scale(global_amax)},
                  [&](uint8_t* c, const float* v, int64_t n, float m, int64_t first) {
                    e2m1_quantize(isa, c, v, n, m, sr_key, first_index + first);
                  });
}

void nvfp4_quantize_reference(uint8_t* codes, uint8_t* block_scales, const float* x,
                              const BlockGrid& g, float global_amax, const uint32_t* sr_key,
                              int64_t first_index) {
  quantize_blocks_reference(
      codes, block_scales, x, g, Nvfp4Rule{nvfp4_global_encode_scale(global_amax)},
      [&](float v, int64_t i) {
        return sr_key ? e2m1_encode_stochastic(
                            v, counter_bits(*sr_key, static_cast<uint32_t>(first_index + i)))
                      : e2m1_encode(v);
      });
}

void nvfp4_dequantize(float* y, const uint8_t* codes, const uint8_t* block_scales,
                      const BlockGrid& g, float global_amax) {
  const float s = nvfp4_global_encode_scale(global_amax);
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c)
      y[r * g.cols + c] = e2m1_decode(codes[r * g.cols + c]) *
                          Nvfp4BlockScales{s, block_scales[g.block_of(r, c)]}.decode();
}

}  // namespace fp8lm
