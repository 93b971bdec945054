#pragma once
// FP8 autocast, like TE's fp8_autocast: inside an enabled scope, GEMMs of modules run in FP8
// with the scope's recipe. Each scaling store used in the scope is remembered, and when the
// scope closes its forward slots are updated (delayed scaling); backward slots are updated by
// the model after its backward pass with the same recipe.
#include <vector>

#include "core/precision.h"
#include "core/scoped_value.h"
#include "fp8/scaling.h"

namespace fp8lm {

class ScalingStore;

struct AutocastState {
  bool enabled = false;
  Fp8Recipe recipe;
  AmaxReducer reduce;               // cross-process amax max-reduce (empty: one process)
  std::vector<ScalingStore*> used;  // stores whose forward slots update at scope exit
  // Stochastic rounding's seed for this forward and its backward (NVFP4 gradients): the trainer
  // derives one per run seed, step, micro-batch and rank, so a resumed run draws the same bits.
  uint64_t step_seed = 0;
};

// The innermost scope's state on this thread (a disabled default outside any scope).
AutocastState& autocast_state();

class Autocast {
 public:
  Autocast(bool enabled, const Fp8Recipe& recipe, AmaxReducer reduce = {}, uint64_t step_seed = 0);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  AutocastState saved_;
};

// The precision of GEMMs that do not run in FP8 (bf16 or fp32), like torch.autocast's dtype.
// Modules read it in forward and keep what they used for their backward.
class GemmPrecision : ScopedValue<Precision> {
 public:
  explicit GemmPrecision(Precision p);
  static Precision current();
};

// Called by a module's FP8 forward: registers its store for the update at scope exit.
void autocast_register(ScalingStore& store);

}  // namespace fp8lm
