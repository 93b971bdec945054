#include "fp8/block_stats.h"

#include <cmath>

#include "core/e2m1.h"
#include "core/e8m0.h"

namespace fp8lm {

BlockScaleStats block_scale_stats(const BlockCast& c, const float* x, const uint8_t* codes,
                                  const void* scales, float tensor_scale_inv) {
  const BlockGrid& g = c.grid;
  const bool fp4 = c.scheme == BlockScheme::Nvfp4;
  // A value saturates when it lies beyond the rounding boundary above the largest magnitude
  // (where a wider format would round it up): halfway to the next power-of-two step, the tie
  // going to the even neighbour: E4M3 448 | 464 | 480 (tie to 448), E5M2 57344 | 61440 | 65536
  // and E2M1 6 | 7 | 8 (ties to the value past max). Values that merely round down to the
  // largest one are ordinary rounding.
  const double boundary = fp4 ? 7.0 : c.format == DType::E4M3 ? 464.0 : 61440.0;
  const bool tie_saturates = fp4 || c.format == DType::E5M2;
  BlockScaleStats st;
  st.tensor_scale = 1.0f / tensor_scale_inv;
  const auto multiplier = [&](int64_t b) -> double {
    switch (c.scheme) {
      case BlockScheme::Mxfp8:
        return e8m0_decode(static_cast<const uint8_t*>(scales)[b]);
      case BlockScheme::Fp8Block:
        return static_cast<const float*>(scales)[b];
      case BlockScheme::Nvfp4:
        break;
    }
    return static_cast<double>(fp8_decode(static_cast<const uint8_t*>(scales)[b], DType::E4M3)) *
           tensor_scale_inv;
  };
  for_each_block(g, [&](int64_t b, int64_t r0, int64_t c0, int64_t nr, int64_t nc) {
    const double m = multiplier(b);
    bool any_nonzero = false, any_code = false, clipped = false;
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t col = c0; col < c0 + nc; ++col) {
        const int64_t i = r * g.cols + col;
        const double a = std::fabs(static_cast<double>(x[i]));
        any_nonzero |= a != 0 && !std::isnan(a);
        const double scaled = a / m;  // NaN compares false below
        clipped |= m > 0 && (tie_saturates ? scaled >= boundary : scaled > boundary);
        const float v = fp4 ? e2m1_decode(codes[i]) : fp8_decode(codes[i], c.format);
        any_code |= v != 0.0f && m > 0;  // a zero multiplier (NVFP4) zeroes every code
      }
    ++st.blocks;
    if (!any_nonzero) {
      ++st.zero_blocks;
      return;
    }
    st.saturated_blocks += clipped;
    st.flushed_blocks += !any_code;
    if (m > 0 && std::isfinite(m)) ++st.exponents[std::ilogb(m)];
  });
  return st;
}

}  // namespace fp8lm
