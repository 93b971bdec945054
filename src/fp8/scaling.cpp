#include "fp8/scaling.h"

#include "core/enum_names.h"

namespace fp8lm {
void ScalingState::record_amax(float amax) {
  amax_history[0] = max_keeping_nan(amax_history[0], amax);
}

CastStats ScalingState::cast(uint8_t* codes, const float* x, int64_t n, bool saturate) {
  const CastStats stats = quantize(codes, x, n, scale, format, saturate);
  record_cast(stats, n);
  return stats;
}

void update_delayed_scaling(ScalingState& s, const DelayedScaling& recipe) {
  update_delayed_scaling(
      s.amax_history.data(), static_cast<int64_t>(s.amax_history.size()), fp8_max(s.format),
      recipe.margin, recipe.amax_compute_algo == AmaxComputeAlgo::MostRecent, s.scale, s.scale_inv);
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
