#pragma once
// What the engine reports of its FP8 scaling: a plain result type, apart from the Training
// and Model handles (fp8lm/training.h) so that the modules that fill it need not see them.
#include <string>
#include <vector>

namespace fp8lm {

// One FP8 scaling slot of one GEMM, what a TE user reads from fp8_meta
// (docs/reference/numerics.md).
struct Fp8SlotState {
  std::string gemm;  // the GEMM's checkpoint name, e.g. "layers.0.fc1"
  std::string slot;  // "input", "weight", "output", "grad_output" or "grad_input"
  float scale = 1.0f, scale_inv = 1.0f;
  std::vector<float> amax_history;  // [0] accumulates the running step; the rest past steps'
  double saturated_fraction = 0, flushed_fraction = 0;  // of the slot's last cast
};

}  // namespace fp8lm
