#include "fp8/block_cast.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/e2m1.h"
#include "core/e8m0.h"
#include "fp8/block_stats.h"
#include "fp8/hadamard.h"
#include "fp8/mx_quantize.h"
#include "fp8/nvfp4_quantize.h"
#include "fp8lm/error.h"

namespace fp8lm {

size_t block_scale_bytes(const BlockCast& c) {
  const auto n = static_cast<size_t>(c.grid.blocks());
  return c.scheme == BlockScheme::Fp8Block ? n * sizeof(float) : n;
}

BlockCast recipe_block_cast(const Fp8Recipe& r, BlockRole role, bool columnwise, int64_t rows,
                            int64_t cols) {
  BlockCast c;
  c.scheme = r.kind == ScalingKind::Block   ? BlockScheme::Fp8Block
             : r.kind == ScalingKind::Mxfp8 ? BlockScheme::Mxfp8
                                            : BlockScheme::Nvfp4;
  c.params = r.block;
  const int64_t b = c.scheme == BlockScheme::Fp8Block ? kFp8Block
                    : c.scheme == BlockScheme::Mxfp8  ? kMxBlock
                                                      : kNvfp4Block;
  // Weights in 2D blocks: Float8BlockScaling's w_block_scaling_dim = 2, NVFP4's 2D
  // quantization (TE recipe/__init__.py); MXFP8's weights are 1D like everything else.
  const bool two_d = role == BlockRole::Weight &&
                     (r.kind == ScalingKind::Block ||
                      (r.kind == ScalingKind::Nvfp4 && !r.nvfp4.disable_2d_quantization));
  c.grid = two_d        ? BlockGrid{rows, cols, b, b}
           : columnwise ? BlockGrid{rows, cols, b, 1}
                        : BlockGrid{rows, cols, 1, b};
  if (c.scheme == BlockScheme::Nvfp4) {
    // TE: the RHT on the column-wise (wgrad) copies of inputs and gradients; stochastic
    // rounding on gradients only.
    c.rht = columnwise && role != BlockRole::Weight && !r.nvfp4.disable_rht;
    c.stochastic_rounding = role == BlockRole::GradOutput && !r.nvfp4.disable_stochastic_rounding;
  }
  return c;
}

std::vector<float> block_decode(const BlockCast& c, const uint8_t* codes, const void* scales,
                                float tensor_scale_inv) {
  const BlockGrid& g = c.grid;
  std::vector<float> y(static_cast<size_t>(g.rows * g.cols));
  for (int64_t r = 0; r < g.rows; ++r) {
    for (int64_t col = 0; col < g.cols; ++col) {
      const int64_t i = r * g.cols + col, b = g.block_of(r, col);
      float v = 0.0f;
      switch (c.scheme) {
        case BlockScheme::Fp8Block:
          v = fp8_decode(codes[i], c.format) * static_cast<const float*>(scales)[b];
          break;
        case BlockScheme::Mxfp8:
          v = fp8_decode(codes[i], c.format) * e8m0_decode(static_cast<const uint8_t*>(scales)[b]);
          break;
        case BlockScheme::Nvfp4:
          v = kE2M1Values[codes[i] & 0xf] *
              fp8_decode(static_cast<const uint8_t*>(scales)[b], Fp8Format::E4M3);
          break;
      }
      y[static_cast<size_t>(i)] = v * tensor_scale_inv;
    }
  }
  return y;
}

namespace {

// f(first row, rows) over stripes of whole block rows, spread over the OpenMP threads: each
// stripe's blocks, codes and scales are its own, and stochastic rounding's draws follow an
// element's place, so the split changes no bit.
template <class F>
void for_each_stripe(const BlockGrid& g, F f) {
  // About 64K values a task: enough to amortize the fork, small enough to balance.
  const int64_t per = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.block_rows * g.cols));
  const int64_t stripes = g.grid_rows();
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < stripes; s += per) {
    const int64_t r0 = s * g.block_rows;
    f(r0, std::min(per * g.block_rows, g.rows - r0));
  }
}

// absmax over the OpenMP threads (a maximum is the same in any order).
float parallel_absmax(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  float amax = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : amax)
  for (int64_t i = 0; i < n; i += kChunk)
    amax = std::max(amax, absmax(x + i, std::min(kChunk, n - i)));
  return amax;
}

}  // namespace

void check_block_cast(const BlockCast& c) {
  if (c.scheme == BlockScheme::Fp8Block && !c.params.power_2_scale) {
    throw Error(
        "Float8BlockScaling without power-of-two scales is not emulated: its FP32 scale_inv "
        "times a decoded value is not exact in BF16");
  }
  if (c.scheme == BlockScheme::Nvfp4 && c.rht && c.grid.rows % kRhtSize != 0) {
    throw Error(
        fmt::format("NVFP4's Hadamard transform needs a multiple of 16 rows (tokens), not {}; "
                    "use disable_rht or a batch of batch_size x seq_len that is",
                    c.grid.rows));
  }
}

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work) {
  check_block_cast(c);
  const BlockGrid& g = c.grid;
  const int64_t n = g.rows * g.cols;
  *out.tensor_scale_inv = 1.0f;
  // A stripe [r0, r0 + nr) as a tensor of its own: where its codes and scales start.
  const auto sub = [&](int64_t nr) { return BlockGrid{nr, g.cols, g.block_rows, g.block_cols}; };
  const auto scale_at = [&](int64_t r0) { return (r0 / g.block_rows) * g.grid_cols(); };
  const auto codes_at = [&](int64_t r0) { return out.codes ? out.codes + r0 * g.cols : nullptr; };
  switch (c.scheme) {
    case BlockScheme::Mxfp8: {
      auto* scales = static_cast<uint8_t*>(out.scales);
      if (out.amax) *out.amax = parallel_absmax(x, n);
      for_each_stripe(g, [&](int64_t r0, int64_t nr) {
        mxfp8_quantize_to_bf16(codes_at(r0), scales + scale_at(r0), out.operand + r0 * g.cols,
                               x + r0 * g.cols, sub(nr), c.format);
      });
      break;
    }
    case BlockScheme::Fp8Block: {
      auto* scale_inv = static_cast<float*>(out.scales);
      if (out.amax) *out.amax = parallel_absmax(x, n);
      for_each_stripe(g, [&](int64_t r0, int64_t nr) {
        fp8_block_quantize_to_bf16(codes_at(r0), scale_inv + scale_at(r0),
                                   out.operand + r0 * g.cols, x + r0 * g.cols, sub(nr), c.format,
                                   c.params);
      });
      break;
    }
    case BlockScheme::Nvfp4: {
      // The tensor amax the global scale needs: of the transformed tensor where there is one.
      // The transform is written out (to work) only for the statistics, which read it.
      const bool rht_in_cast = c.rht && !out.stats;
      float amax = 0.0f;
      if (c.rht) {
        for_each_stripe({g.rows, g.cols, kRhtSize, 1}, [&](int64_t r0, int64_t nr) {
          float a = 0.0f;
          if (rht_in_cast) {
            a = rht16_absmax(x + r0 * g.cols, nr, g.cols);
          } else {
            rht16_rows(work + r0 * g.cols, x + r0 * g.cols, nr, g.cols);
            a = absmax(work + r0 * g.cols, nr * g.cols);
          }
#pragma omp critical(fp8lm_rht_amax)
          amax = std::max(amax, a);
        });
        if (!rht_in_cast) x = work;
      } else {
        amax = parallel_absmax(x, n);
      }
      auto* scales = static_cast<uint8_t*>(out.scales);
      if (out.amax) *out.amax = amax;
      const uint32_t* key = c.stochastic_rounding ? &c.sr_key : nullptr;
      for_each_stripe(g, [&](int64_t r0, int64_t nr) {
        nvfp4_quantize_to_bf16(codes_at(r0), scales + scale_at(r0), out.operand + r0 * g.cols,
                               x + r0 * g.cols, sub(nr), amax, key, r0 * g.cols, rht_in_cast);
      });
      *out.tensor_scale_inv = 1.0f / nvfp4_global_encode_scale(amax);
      break;
    }
  }
  if (out.stats) *out.stats = block_scale_stats(c, x, out.codes, out.scales, *out.tensor_scale_inv);
}

}  // namespace fp8lm
