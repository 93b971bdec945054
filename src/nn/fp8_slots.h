#pragma once
// Every GEMM's FP8 slots of a model, in model order, as the public API, the metrics and
// the report show them.
#include <vector>

#include "fp8lm/fp8_state.h"
#include "nn/gpt.h"

namespace fp8lm {

std::vector<Fp8SlotState> fp8_slot_states(GPT& model);
// The same of any Linears (fp8lm.torch's, each on its own).
std::vector<Fp8SlotState> fp8_slot_states(const std::vector<Linear*>& linears);

}  // namespace fp8lm
