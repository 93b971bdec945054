#pragma once
// Per-tensor FP8 scaling state and Transformer Engine's update rules
// (docs/reference/numerics.md).
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "fp8/quantize.h"
#include "fp8/recipe.h"
#include "fp8/scaling_rules.h"

namespace fp8lm {

// What the last cast through a slot lost; TE does not report these.
struct LastCast {
  int64_t n = 0, saturated = 0, flushed = 0;
  double saturated_fraction() const {
    return n ? static_cast<double>(saturated) / static_cast<double>(n) : 0.0;
  }
  double flushed_fraction() const {
    return n ? static_cast<double>(flushed) / static_cast<double>(n) : 0.0;
  }
};

// One tensor's quantization state: q = cast(x * scale), x ≈ q * scale_inv.
struct ScalingState {
  DType format = DType::E4M3;
  float scale = 1.0f;
  float scale_inv = 1.0f;
  // TE's layout: [0] accumulates this step's amax; the rest hold past steps' amaxes.
  std::vector<float> amax_history;
  LastCast last_cast;

  ScalingState() : amax_history(1, 0.0f) {}
  ScalingState(DType f, int history_len) : format(f), amax_history(history_len, 0.0f) {}

  // Max-accumulates into amax_history[0]; a NaN sticks (so the update keeps the scale).
  void record_amax(float amax);
  void set_scale(float s) {
    scale = s;
    scale_inv = 1.0f / s;
  }
  // Quantizes with the current scale, records the amax and the cast's losses.
  CastStats cast(uint8_t* codes, const float* x, int64_t n, bool saturate = true);
  // Records a cast of n values that a fused producer did with this slot's scale.
  void record_cast(const CastStats& stats, int64_t n) {
    record_amax(stats.amax);
    last_cast = {n, stats.saturated, stats.flushed};
  }
};

// Delayed scaling of one slot (fp8/scaling_rules.h).
void update_delayed_scaling(ScalingState& s, const DelayedScaling& recipe);

// Current scaling: scale from x's own amax (first pass), then the cast (second pass).
CastStats cast_current_scaling(ScalingState& s, const CurrentScaling& recipe, uint8_t* codes,
                               const float* x, int64_t n);

// TE's slot layout per GEMM: forward input, weight, output; backward grad_output, grad_input.
enum class Slot { Input, Weight, Output, GradOutput, GradInput };
constexpr Direction slot_direction(Slot s) {
  return s == Slot::GradOutput || s == Slot::GradInput ? Direction::Backward : Direction::Forward;
}
std::string_view slot_name(Slot s);  // "input", "weight", "output", "grad_output", "grad_input"

class Fp8Meta {
 public:
  Fp8Meta() : Fp8Meta(Format::Hybrid, 1) {}
  Fp8Meta(Format format, int amax_history_len);
  explicit Fp8Meta(const DelayedScaling& r) : Fp8Meta(r.format, r.amax_history_len) {}

  ScalingState& operator[](Slot s);
  const ScalingState& operator[](Slot s) const;
  std::span<ScalingState> slots(Direction d) {
    return d == Direction::Forward ? std::span<ScalingState>(fwd_) : std::span<ScalingState>(bwd_);
  }

 private:
  std::array<ScalingState, 3> fwd_;
  std::array<ScalingState, 2> bwd_;
};

// Max-reduces a buffer of amaxes in place across processes (every rank gets the max).
// An empty function means one process.
using AmaxReducer = std::function<void(std::span<float>)>;

}  // namespace fp8lm
