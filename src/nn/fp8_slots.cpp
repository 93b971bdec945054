#include "nn/fp8_slots.h"

namespace fp8lm {

std::vector<Fp8SlotState> fp8_slot_states(GPT& model) {
  return fp8_slot_states(model.linears());
}

std::vector<Fp8SlotState> fp8_slot_states(const std::vector<Linear*>& linears) {
  std::vector<Fp8SlotState> out;
  for (Linear* l : linears) {
    const Fp8Meta meta = l->fp8_meta();
    for (Slot s : {Slot::Input, Slot::Weight, Slot::Output, Slot::GradOutput, Slot::GradInput}) {
      const ScalingState& st = meta[s];
      out.push_back({l->name(), std::string(slot_name(s)), st.scale, st.scale_inv, st.amax_history,
                     st.last_cast.saturated_fraction(), st.last_cast.flushed_fraction()});
    }
  }
  return out;
}

}  // namespace fp8lm
