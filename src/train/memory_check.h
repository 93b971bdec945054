#pragma once
// A run too large for the machine is refused before anything is allocated, with the estimate,
// rather than dying to the OOM killer minutes later.
#include <cstdint>

#include "fp8lm/train_config.h"

namespace fp8lm {

// Bytes of host memory training `c` needs, about: per parameter the FP32 weight, its gradient,
// AdamW's two moments and a 16-bit cast (18 bytes); on the CPU also the activations saved for
// backward and the logits.
int64_t training_memory_estimate(const TrainConfig& c);

// Error with the estimate when it exceeds the memory the machine has available
// (/proc/meminfo's MemAvailable); nothing is checked where that cannot be read.
void check_training_fits(const TrainConfig& c);

}  // namespace fp8lm
