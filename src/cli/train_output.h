#pragma once
// What fp8lm train prints: the run's header (precision, device, model, recipe, ranks), a
// progress line per step on stderr, and the result.
#include "train/trainer.h"

namespace fp8lm::cli {

void print_run_start(Trainer& trainer);
// One line redrawn in place on a terminal; a line every 10% otherwise (logs, CI).
void print_progress(const StepStats& s);
void print_result(const TrainConfig& c, const TrainResult& r);

}  // namespace fp8lm::cli
