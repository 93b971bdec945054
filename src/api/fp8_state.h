#pragma once
// Every GEMM's FP8 slots of a model, as the public API shows them.
#include <vector>

#include "fp8lm/training.h"
#include "nn/gpt.h"

namespace fp8lm {

std::vector<Fp8SlotState> fp8_slot_states(GPT& model);

}  // namespace fp8lm
