#pragma once
// Gradient accumulation's micro-batches (TE's is_first_microbatch). The weights do not change
// between the micro-batches of one optimizer step, so the first makes each weight's FP8 cast
// and keeps it, and the others (forward and backward) reuse it with the scale it was made
// with: one weight cast per step, however many micro-batches.
#include "core/scoped_value.h"

namespace fp8lm {

enum class MicroBatch {
  Only,   // no accumulation: a training forward's weight cast serves this step only
  First,  // casts each weight and keeps the cast for the step
  Later,  // reuses the first micro-batch's casts
};

using MicroBatchSetting = ThreadSetting<MicroBatch, MicroBatch::Only, struct MicroBatchTag>;
inline MicroBatch current_micro_batch() {
  return MicroBatchSetting::value();
}
using MicroBatchScope = MicroBatchSetting::Scope;

}  // namespace fp8lm
