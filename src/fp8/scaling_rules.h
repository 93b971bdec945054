#pragma once
// TE's delayed and current scaling rules for one slot (fp8/scaling.h), one source for the CPU
// and the device (FP8LM_OP, in core/op_math.h's arithmetic: one correctly rounded division
// each), so the CPU's slots and the CUDA kernel that updates every slot at once give the same
// bits.
#include <cstdint>

#include "core/op_math.h"

namespace fp8lm {

// max that lets a NaN through, so a poisoned amax freezes the scale instead of vanishing.
FP8LM_OP float max_keeping_nan(float a, float b) {
  const bool nan = (op_math::bits(a) & 0x7fffffffu) > 0x7f800000u ||
                   (op_math::bits(b) & 0x7fffffffu) > 0x7f800000u;
  return nan ? op_math::from_bits(0x7fc00000u) : (a < b ? b : a);
}

// The scale for an amax: (fp8_max / amax) / 2^margin when amax is finite and > 0, else
// `previous`. A scale that overflows becomes FLT_MAX; one that underflows becomes FLT_MIN
// (so scale_inv stays finite). Scaling by 2^-margin is exact unless the result leaves the
// normal range, and there both sides clamp whatever the rounding.
FP8LM_OP float compute_scale(float amax, float fp8_max, int margin, float previous) {
  if ((op_math::bits(amax) & 0x7fffffffu) >= 0x7f800000u || !(amax > 0.0f)) return previous;
  const float s = op_math::ldexp(op_math::div(fp8_max, amax), -margin);
  if (op_math::bits(s) == 0x7f800000u) return 0x1.fffffep127f;
  return s < 0x1p-126f ? 0x1p-126f : s;
}

// Delayed scaling, one slot of history h[0, H), after its amax has been reduced across
// processes: amax = max(history) or h[0] (most_recent); the history rolled so the newest amax
// moves to the end and h[0] restarts at 0 (not rolled if h[0] is 0: the module did not run);
// then scale = compute_scale(amax, ...), scale_inv = 1 / scale. The max propagates NaN, as
// torch.max does in TE.
FP8LM_OP void update_delayed_scaling(float* h, int64_t H, float fp8_max, int margin,
                                     bool most_recent, float& scale, float& scale_inv) {
  const float newest = h[0];
  float amax = newest;
  if (!most_recent) {
    amax = 0.0f;
    for (int64_t i = 0; i < H; ++i) amax = max_keeping_nan(amax, h[i]);
  }
  if (newest != 0.0f) {
    for (int64_t i = 0; i + 1 < H; ++i) h[i] = h[i + 1];
    h[H - 1] = newest;
    h[0] = 0.0f;
  }
  scale = compute_scale(amax, fp8_max, margin, scale);
  scale_inv = op_math::div(1.0f, scale);
}

}  // namespace fp8lm
