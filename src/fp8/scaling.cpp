#include "fp8/scaling.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>

#include "core/enum_names.h"

namespace fp8lm {
namespace {
// max that lets a NaN through, so a poisoned amax freezes the scale instead of vanishing.
float max_keeping_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return std::max(a, b);
}
}  // namespace

void ScalingState::record_amax(float amax) {
  amax_history[0] = max_keeping_nan(amax_history[0], amax);
}

CastStats ScalingState::cast(uint8_t* codes, const float* x, int64_t n, bool saturate) {
  const CastStats stats = quantize(codes, x, n, scale, format, saturate);
  record_cast(stats, n);
  return stats;
}

float compute_scale(float amax, float fp8_max, int margin, float previous) {
  if (!std::isfinite(amax) || !(amax > 0.0f)) return previous;
  const float s = std::ldexp(fp8_max / amax, -margin);
  if (std::isinf(s)) return FLT_MAX;
  if (s < FLT_MIN) return FLT_MIN;
  return s;
}

void update_delayed_scaling(std::span<float> h, float fp8_max, int margin, AmaxComputeAlgo algo,
                            float& scale, float& scale_inv) {
  const float amax = algo == AmaxComputeAlgo::MostRecent
                         ? h[0]
                         : std::accumulate(h.begin(), h.end(), 0.0f, max_keeping_nan);
  if (h[0] != 0.0f) {
    std::rotate(h.begin(), h.begin() + 1, h.end());
    h[0] = 0.0f;
  }
  scale = compute_scale(amax, fp8_max, margin, scale);
  scale_inv = 1.0f / scale;
}

void update_delayed_scaling(ScalingState& s, const DelayedScaling& recipe) {
  update_delayed_scaling(s.amax_history, fp8_max(s.format), recipe.margin, recipe.amax_compute_algo,
                         s.scale, s.scale_inv);
}

CastStats cast_current_scaling(ScalingState& s, const CurrentScaling& recipe, uint8_t* codes,
                               const float* x, int64_t n) {
  s.set_scale(compute_scale(absmax(x, n), fp8_max(s.format), recipe.margin, 1.0f));
  return s.cast(codes, x, n);
}

std::string_view slot_name(Slot s) {
  static constexpr EnumNames<Slot, 5> kSlots{
      "slot", {"input", "weight", "output", "grad_output", "grad_input"}};
  return kSlots.name(s);
}

Fp8Meta::Fp8Meta(Format format, int amax_history_len) {
  for (auto& s : fwd_)
    s = ScalingState(tensor_format(format, Direction::Forward), amax_history_len);
  for (auto& s : bwd_)
    s = ScalingState(tensor_format(format, Direction::Backward), amax_history_len);
}

ScalingState& Fp8Meta::operator[](Slot s) {
  const auto i = static_cast<size_t>(s);
  return i < fwd_.size() ? fwd_[i] : bwd_[i - fwd_.size()];
}

const ScalingState& Fp8Meta::operator[](Slot s) const {
  return const_cast<Fp8Meta&>(*this)[s];
}

}  // namespace fp8lm
