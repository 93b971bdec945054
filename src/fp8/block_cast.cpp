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

// operand = table[code] * block scale, rounded to BF16 (exact: block_cast.h), for rows
// [r0, r0 + nr): each row's scales spread over its columns once per block row, so the inner
// loop is a lookup, a multiply and a rounding the compiler vectorizes.
template <class ScaleOf>
void expand_rows(bf16_t* operand, const uint8_t* codes, const BlockGrid& g, int64_t r0, int64_t nr,
                 const float* table, ScaleOf scale_of) {
  thread_local std::vector<float> col_scale;
  col_scale.resize(static_cast<size_t>(g.cols));
  float* s = col_scale.data();
  for (int64_t r = r0; r < r0 + nr; ++r) {
    if (r == r0 || r % g.block_rows == 0) {
      const int64_t br = r / g.block_rows;
      for (int64_t bc = 0; bc < g.grid_cols(); ++bc) {
        const float v = scale_of(br * g.grid_cols() + bc);
        std::fill(s + bc * g.block_cols, s + std::min(g.cols, (bc + 1) * g.block_cols), v);
      }
    }
    const uint8_t* code = codes + r * g.cols;
    bf16_t* out = operand + r * g.cols;
    for (int64_t c = 0; c < g.cols; ++c) out[c] = bf16_from_float(table[code[c]] * s[c]);
  }
}

}  // namespace

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work) {
  const BlockGrid& g = c.grid;
  const int64_t n = g.rows * g.cols;
  *out.tensor_scale_inv = 1.0f;
  // A stripe [r0, r0 + nr) as a tensor of its own: where its codes and scales start.
  const auto sub = [&](int64_t nr) { return BlockGrid{nr, g.cols, g.block_rows, g.block_cols}; };
  const auto scale_at = [&](int64_t r0) { return (r0 / g.block_rows) * g.grid_cols(); };
  switch (c.scheme) {
    case BlockScheme::Mxfp8: {
      auto* scales = static_cast<uint8_t*>(out.scales);
      if (out.amax) *out.amax = absmax(x, n);
      const float* table = fp8_decode_table(c.format).data();
      for_each_stripe(g, [&](int64_t r0, int64_t nr) {
        uint8_t* codes = out.codes + r0 * g.cols;
        if (g.block_cols == 1)
          mxfp8_quantize_columnwise(codes, scales + scale_at(r0), x + r0 * g.cols, nr, g.cols,
                                    c.format);
        else
          mxfp8_quantize_rowwise(codes, scales + scale_at(r0), x + r0 * g.cols, nr, g.cols,
                                 c.format);
        expand_rows(out.operand, out.codes, g, r0, nr, table,
                    [&](int64_t b) { return e8m0_decode(scales[b]); });
      });
      break;
    }
    case BlockScheme::Fp8Block: {
      if (!c.params.power_2_scale) {
        throw Error(
            "Float8BlockScaling without power-of-two scales is not emulated: its FP32 scale_inv "
            "times a decoded value is not exact in BF16");
      }
      auto* scale_inv = static_cast<float*>(out.scales);
      if (out.amax) *out.amax = absmax(x, n);
      const float* table = fp8_decode_table(c.format).data();
      for_each_stripe(g, [&](int64_t r0, int64_t nr) {
        fp8_block_quantize(out.codes + r0 * g.cols, scale_inv + scale_at(r0), x + r0 * g.cols,
                           sub(nr), c.format, c.params);
        expand_rows(out.operand, out.codes, g, r0, nr, table,
                    [&](int64_t b) { return scale_inv[b]; });
      });
      break;
    }
    case BlockScheme::Nvfp4: {
      if (c.rht) {
        if (g.rows % kRhtSize != 0) {
          throw Error(fmt::format(
              "NVFP4's Hadamard transform needs a multiple of 16 rows (tokens), not {}; "
              "use disable_rht or a batch of batch_size x seq_len that is",
              g.rows));
        }
        for_each_stripe({g.rows, g.cols, kRhtSize, 1}, [&](int64_t r0, int64_t nr) {
          rht16_rows(work + r0 * g.cols, x + r0 * g.cols, nr, g.cols);
        });
        x = work;
      }
      auto* scales = static_cast<uint8_t*>(out.scales);
      const float amax = absmax(x, n);
      if (out.amax) *out.amax = amax;
      const uint32_t* key = c.stochastic_rounding ? &c.sr_key : nullptr;
      for_each_stripe(g, [&](int64_t r0, int64_t nr) {
        nvfp4_quantize(out.codes + r0 * g.cols, scales + scale_at(r0), x + r0 * g.cols, sub(nr),
                       amax, key, r0 * g.cols);
        expand_rows(out.operand, out.codes, g, r0, nr, kE2M1Values.data(),
                    [&](int64_t b) { return fp8_decode(scales[b], Fp8Format::E4M3); });
      });
      *out.tensor_scale_inv = 1.0f / nvfp4_global_encode_scale(amax);
      break;
    }
  }
  if (out.stats) *out.stats = block_scale_stats(c, x, out.codes, out.scales, *out.tensor_scale_inv);
}

}  // namespace fp8lm
