#pragma once
// FP8 autocast, like TE's fp8_autocast: inside an enabled scope, GEMMs of modules run in FP8
// with the scope's recipe. Each Fp8Meta used in the scope is remembered, and when the scope
// closes its forward slots are updated (delayed scaling); backward slots are updated by the
// model after its backward pass with the same recipe.
#include <vector>

#include "core/precision.h"
#include "core/scoped_value.h"
#include "fp8/scaling.h"

namespace fp8lm {

enum class ScalingKind { Delayed, Current };

// The recipe fields a user sets (TE's DelayedScaling, plus which kind of scaling).
struct Fp8Recipe {
  ScalingKind kind = ScalingKind::Delayed;
  DelayedScaling delayed;  // margin, format, history length, algorithm, reduce_amax
  CurrentScaling current() const { return {delayed.margin, delayed.format}; }
  Format format() const { return delayed.format; }
};

struct AutocastState {
  bool enabled = false;
  Fp8Recipe recipe;
  AmaxReducer reduce;          // cross-process amax max-reduce (empty: one process)
  std::vector<Fp8Meta*> used;  // metas whose forward slots update at scope exit
};

// The innermost scope's state on this thread (a disabled default outside any scope).
AutocastState& autocast_state();

class Autocast {
 public:
  Autocast(bool enabled, const Fp8Recipe& recipe, AmaxReducer reduce = {});
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

// Called by a module's FP8 forward: registers the meta for the update at scope exit.
void autocast_register(Fp8Meta& meta);

// Quantizes x into codes through one slot, by the recipe's kind of scaling: delayed (the slot's
// current scale) or current (this tensor's own amax). Returns the scale_inv to dequantize with.
float cast_with_recipe(ScalingState& slot, const Fp8Recipe& recipe, uint8_t* codes, const float* x,
                       int64_t n);

}  // namespace fp8lm
