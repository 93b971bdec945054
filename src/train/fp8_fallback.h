#pragma once
// The automatic BF16 fallback (--fp8-fallback auto): a GEMM whose FP8 output goes non-finite,
// or whose FP8 slot keeps saturating, moves to BF16 for the rest of the run, decided alike on
// every rank. And, for any skipped step, what went non-finite first.
#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "fp8/recipe.h"
#include "fp8lm/train_config.h"
#include "nn/gpt.h"
#include "train/data.h"

namespace fp8lm {

// The rule for saturation: a GEMM falls back when more than this fraction of one slot's
// values saturated in each of this many steps in a row.
inline constexpr double kFallbackSaturatedFraction = 0.01;
inline constexpr int64_t kFallbackSaturatedSteps = 16;

// A run's fallbacks so far and each GEMM's saturated steps in a row (a checkpoint keeps both).
struct Fp8FallbackState {
  std::vector<Fp8Fallback> fallbacks;
  std::vector<int64_t> saturated_steps;
};

// After a non-finite step (the scaling state rolled back to where it began): forward again on
// batch, watching every FP8 GEMM's output; the first one that is not finite on any rank falls
// back, and again until none is (a GEMM after a bad one sees a bad input, so only the first is
// to blame). Each fallback is recorded in state and appended to fell.
void fall_back_non_finite(GPT& model, Communicator& ranks, const Fp8Recipe& recipe,
                          const Batch& batch, int64_t step, Fp8FallbackState& state,
                          std::vector<Fp8Fallback>& fell);
// After a step: the saturation rule on the worst rank's fractions (sat: this rank's, from
// ScalingStore::saturation).
void fall_back_saturated(GPT& model, std::vector<ScalingStore::Saturation> sat, Communicator& ranks,
                         int64_t step, Fp8FallbackState& state, std::vector<Fp8Fallback>& fell);

// What went non-finite first in a step: a weight, else the loss, else a gradient in the order
// backward made them (the head's first). Read only when a step is skipped.
std::string first_non_finite(GPT& model, float loss);

}  // namespace fp8lm
