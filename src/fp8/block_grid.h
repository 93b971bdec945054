#pragma once
// The blocks of a block-scaled tensor, and the one way every block recipe (MXFP8, TE's
// Float8BlockScaling, NVFP4) walks them. A row-major [rows, cols] tensor is cut into blocks of
// block_rows x block_cols (1x32 and 32x1 for MXFP8; 1x128, 128x1 and 128x128 for FP8 block
// scaling; 1x16, 16x1 and 16x16 for NVFP4); the last blocks of a row or column are shorter
// where the tensor's size is not a multiple. Each block has one scale, kept in a row-major
// grid of grid_rows() x grid_cols().
//
// A recipe supplies a Rule: `Scale scale(float amax) const` (what is stored per block) and
// `float multiplier(Scale) const` (what each value is multiplied by before the cast). The
// block's amax is max |x| with NaN left out (fmaxf's semantics, as TE's kernels take it).
// quantize_blocks_reference is the scalar twin; quantize_blocks runs the same arithmetic with
// the casts through an ISA's kernels and gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fp8/quantize.h"

namespace fp8lm {

struct BlockGrid {
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 1, block_cols = 1;

  int64_t grid_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t grid_cols() const { return (cols + block_cols - 1) / block_cols; }
  int64_t blocks() const { return grid_rows() * grid_cols(); }
  // The index of the block holding element (r, c) in the grid of scales.
  int64_t block_of(int64_t r, int64_t c) const {
    return (r / block_rows) * grid_cols() + c / block_cols;
  }
};

// f(block index, first row, first column, rows, columns) for each block in grid order.
template <class F>
void for_each_block(const BlockGrid& g, F&& f) {
  for (int64_t br = 0; br < g.grid_rows(); ++br) {
    const int64_t r0 = br * g.block_rows, nr = std::min(g.block_rows, g.rows - r0);
    for (int64_t bc = 0; bc < g.grid_cols(); ++bc) {
      const int64_t c0 = bc * g.block_cols, nc = std::min(g.block_cols, g.cols - c0);
      f(br * g.grid_cols() + bc, r0, c0, nr, nc);
    }
  }
}

// Each column's scale in block row br: scale_of(block index) over the block's columns (what a
// row's values are decoded with).
template <class ScaleOf>
void spread_block_scales(float* col_scale, const BlockGrid& g, int64_t br, ScaleOf scale_of) {
  for (int64_t bc = 0; bc < g.grid_cols(); ++bc) {
    std::fill(col_scale + bc * g.block_cols, col_scale + std::min(g.cols, (bc + 1) * g.block_cols),
              scale_of(br * g.grid_cols() + bc));
  }
}

// amax[c] = max(amax[c], |row[c]|) for each of n columns, a NaN left out (as fmaxf leaves it):
// column-wise blocks' amaxes, one row at a time.
inline void column_absmax(float* amax, const float* row, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float a = std::fabs(row[c]);
    amax[c] = a > amax[c] ? a : amax[c];
  }
}

// The scalar twin. cast_one(value * multiplier, element index) -> code.
template <class Rule, class Scale, class CastOne>
void quantize_blocks_reference(uint8_t* codes, Scale* scales, const float* x, const BlockGrid& g,
                               const Rule& rule, CastOne cast_one) {
  for_each_block(g, [&](int64_t b, int64_t r0, int64_t c0, int64_t nr, int64_t nc) {
    float amax = 0.0f;
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t c = c0; c < c0 + nc; ++c) amax = std::fmax(amax, std::fabs(x[r * g.cols + c]));
    scales[b] = rule.scale(amax);
    const float m = rule.multiplier(scales[b]);
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t c = c0; c < c0 + nc; ++c) {
        const int64_t i = r * g.cols + c;
        codes[i] = cast_one(x[i] * m, i);
      }
  });
}

// With the casts through an ISA's kernels (cast_run), a stripe of block rows at a time. The
// stripe's block amaxes are taken in one sweep over its rows (element-wise maxima the compiler
// vectorizes down columns, row_block_absmax along rows: a maximum is exact in any order, and a
// NaN is left out as fmaxf leaves it), then each
// row's products x * m are formed into a run and cast in one call with multiplier 1 (an exact
// identity), so every value is the twin's x * m cast the same way, without a kernel call per block.
// cast_run(codes, values, n, multiplier, index of values[0]) casts a contiguous run. A rule may
// also offer scale_row(isa, scales, multipliers, amaxes, n): its scale and multiplier of n
// blocks at once, the same bits (NVFP4's, whose blocks are short enough for the per-block
// steps to matter).
template <class Rule, class Scale, class CastRun>
void quantize_blocks(Isa isa, uint8_t* codes, Scale* scales, const float* x, const BlockGrid& g,
                     const Rule& rule, CastRun cast_run) {
  const int64_t gc = g.grid_cols(), bw = g.block_cols;
  thread_local std::vector<float> amax, mult, run;  // stripes run on several threads
  amax.resize(static_cast<size_t>(gc));
  mult.resize(static_cast<size_t>(gc));
  run.resize(static_cast<size_t>(g.cols));
  for (int64_t br = 0; br < g.grid_rows(); ++br) {
    const int64_t r0 = br * g.block_rows, nr = std::min(g.block_rows, g.rows - r0);
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t r = r0; r < r0 + nr; ++r) {
      const float* row = x + r * g.cols;
      if (bw == 1) {
        column_absmax(amax.data(), row, g.cols);
      } else {
        row_block_absmax(isa, amax.data(), row, g.cols, bw);
      }
    }
    if constexpr (requires { rule.scale_row(isa, scales, mult.data(), amax.data(), gc); }) {
      rule.scale_row(isa, scales + br * gc, mult.data(), amax.data(), gc);
    } else {
      for (int64_t bc = 0; bc < gc; ++bc) {
        scales[br * gc + bc] = rule.scale(amax[bc]);
        mult[bc] = rule.multiplier(scales[br * gc + bc]);
      }
    }
    for (int64_t r = r0; r < r0 + nr; ++r) {
      const float* row = x + r * g.cols;
      if (bw == 1) {
        for (int64_t c = 0; c < g.cols; ++c) run[c] = row[c] * mult[c];
      } else {
        for (int64_t bc = 0; bc < gc; ++bc) {
          const float m = mult[bc];
          for (int64_t c = bc * bw; c < std::min(g.cols, (bc + 1) * bw); ++c) run[c] = row[c] * m;
        }
      }
      cast_run(codes ? codes + r * g.cols : nullptr, run.data(), g.cols, 1.0f, r * g.cols);
    }
  }
}

// quantize_blocks, also writing each row's GEMM operand as its codes are made: cast_row(codes,
// operand, values, scales, n, index of values[0]) casts a row whose values' decode scales
// (decode_scale of their blocks' stored scales) are `scales`.
template <class Rule, class Scale, class DecodeScale, class CastRow>
void quantize_blocks_to_bf16(Isa isa, uint8_t* codes, Scale* scales, bf16_t* operand,
                             const float* x, const BlockGrid& g, const Rule& rule,
                             DecodeScale decode_scale, CastRow cast_row) {
  thread_local std::vector<float> col_scale;
  col_scale.resize(static_cast<size_t>(g.cols));
  int64_t spread = -1;  // the block row col_scale holds
  quantize_blocks(isa, codes, scales, x, g, rule,
                  [&](uint8_t* c, const float* v, int64_t n, float, int64_t first) {
                    const int64_t br = first / g.cols / g.block_rows;
                    if (br != spread) {
                      spread_block_scales(col_scale.data(), g, br,
                                          [&](int64_t b) { return decode_scale(scales[b]); });
                      spread = br;
                    }
                    cast_row(c, operand + first, v, col_scale.data(), n, first);
                  });
}

// cast_row for the FP8 element formats: the codes and the operand (fp8_cast_to_bf16), or with
// null codes the operand alone (fp8_round_to_bf16).
inline auto fp8_cast_row(Isa isa, DType format) {
  return
      [isa, format](uint8_t* c, bf16_t* out, const float* v, const float* s, int64_t n, int64_t) {
        if (c) {
          fp8_cast_to_bf16(isa, c, out, v, s, n, format);
        } else {
          fp8_round_to_bf16(isa, out, v, s, n, format);
        }
      };
}

}  // namespace fp8lm
