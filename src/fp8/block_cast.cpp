#include "fp8/block_cast.h"

#include <fmt/format.h>

#include "core/e2m1.h"
#include "core/e8m0.h"
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

// operand = decoded value * block scale, rounded to BF16 (exact: see block_cast.h); the block's
// scale taken once, each row of the block a contiguous run.
template <class Scale, class Decode>
void expand(bf16_t* operand, const uint8_t* codes, const BlockGrid& g, Scale scale_of,
            Decode decode) {
  for_each_block(g, [&](int64_t b, int64_t r0, int64_t c0, int64_t nr, int64_t nc) {
    const float s = scale_of(b);
    for (int64_t r = r0; r < r0 + nr; ++r) {
      const int64_t at = r * g.cols + c0;
      for (int64_t i = at; i < at + nc; ++i) operand[i] = bf16_from_float(decode(codes[i]) * s);
    }
  });
}

}  // namespace

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work) {
  const BlockGrid& g = c.grid;
  const int64_t n = g.rows * g.cols;
  *out.tensor_scale_inv = 1.0f;
  switch (c.scheme) {
    case BlockScheme::Mxfp8: {
      auto* scales = static_cast<uint8_t*>(out.scales);
      if (out.amax) *out.amax = absmax(x, n);
      if (g.block_cols == 1)
        mxfp8_quantize_columnwise(out.codes, scales, x, g.rows, g.cols, c.format);
      else
        mxfp8_quantize_rowwise(out.codes, scales, x, g.rows, g.cols, c.format);
      expand(
          out.operand, out.codes, g, [&](int64_t b) { return e8m0_decode(scales[b]); },
          [&](uint8_t code) { return fp8_decode(code, c.format); });
      return;
    }
    case BlockScheme::Fp8Block: {
      if (!c.params.power_2_scale) {
        throw Error(
            "Float8BlockScaling without power-of-two scales is not emulated: its FP32 scale_inv "
            "times a decoded value is not exact in BF16");
      }
      auto* scale_inv = static_cast<float*>(out.scales);
      if (out.amax) *out.amax = absmax(x, n);
      fp8_block_quantize(out.codes, scale_inv, x, g, c.format, c.params);
      expand(
          out.operand, out.codes, g, [&](int64_t b) { return scale_inv[b]; },
          [&](uint8_t code) { return fp8_decode(code, c.format); });
      return;
    }
    case BlockScheme::Nvfp4: {
      if (c.rht) {
        if (g.rows % kRhtSize != 0) {
          throw Error(fmt::format(
              "NVFP4's Hadamard transform needs a multiple of 16 rows (tokens), not {}; "
              "use disable_rht or a batch of batch_size x seq_len that is",
              g.rows));
        }
        rht16_rows(work, x, g.rows, g.cols);
        x = work;
      }
      auto* scales = static_cast<uint8_t*>(out.scales);
      const float amax = absmax(x, n);
      if (out.amax) *out.amax = amax;
      nvfp4_quantize(out.codes, scales, x, g, amax, c.stochastic_rounding ? &c.sr_key : nullptr);
      *out.tensor_scale_inv = 1.0f / nvfp4_global_encode_scale(amax);
      expand(
          out.operand, out.codes, g,
          [&](int64_t b) { return fp8_decode(scales[b], Fp8Format::E4M3); }, e2m1_decode);
      return;
    }
  }
}

}  // namespace fp8lm
