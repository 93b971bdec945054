#include "train/run_loop.h"

#include <algorithm>

namespace fp8lm {

std::optional<double> scheduled_validation(Trainer& trainer, const RunSchedule& schedule,
                                           int64_t step) {
  if (schedule.val_every > 0 && (step % schedule.val_every == 0 || trainer.done()))
    return trainer.validation_loss();
  return std::nullopt;
}

RunEnd run_training(Trainer& trainer, const RunSchedule& schedule, RunRecorder& recorder,
                    const ProgressFn& progress, const std::atomic<bool>* stop,
                    TrainResult* result) {
  const bool fp8 = trainer.precision().precision == Precision::Fp8;
  // Every rank comes here; under ZeRO-1 the optimizer state is gathered on rank 0 to be written
  // whole, and dropped again after.
  const auto checkpoint = [&] {
    trainer.gather_optimizer_state();
    recorder.checkpoint(trainer);
    trainer.release_gathered_optimizer_state();
  };
  const auto record = [&](const StepStats& stats, bool snapshot) {
    StepRecord r{stats, snapshot};
    recorder.step(trainer, r);
    if (progress) progress(r.stats);
  };
  const auto between_reads = static_cast<size_t>(
      std::clamp<int64_t>(schedule.steps_between_reads, 1, Trainer::kMaxUnreadSteps));
  while (!trainer.done()) {
    // The steps whose FP8 state is recorded (below) record their block scales too.
    const int64_t step = trainer.steps_done() + 1;
    const bool snapshot = fp8 && (step % std::max<int64_t>(1, schedule.fp8_snapshot_every) == 0 ||
                                  step == 1 || step == trainer.config().steps);
    const bool checkpoint_due = schedule.checkpoint_every > 0 &&
                                step % schedule.checkpoint_every == 0 &&
                                step < trainer.config().steps;
    std::vector<StepStats> read;
    bool stopping = false;
    try {
      trainer.collect_block_stats(snapshot);
      trainer.launch_step();
      trainer.collect_block_stats(false);
      // A signal reaches the ranks at different moments: they agree on it, so all stop after
      // the same step.
      stopping = trainer.any_rank(stop && stop->load()) ||
                 (schedule.stop_after > 0 && step >= schedule.stop_after);
      // What records or looks at the state after this step reads it first.
      const bool validated = schedule.val_every > 0 && step % schedule.val_every == 0;
      if (trainer.read_due(between_reads) || snapshot || validated || checkpoint_due || stopping)
        read = trainer.read_steps();
    } catch (const SkipLimitReached& e) {  // the stopping step is recorded, then the run ends
      for (const StepStats& s : e.steps) record(s, false);
      throw;
    }
    if (read.empty()) continue;
    // Only the last step read can be one that is validated or snapshot: those read at once.
    read.back().val_loss = scheduled_validation(trainer, schedule, read.back().step);
    for (size_t i = 0; i < read.size(); ++i) record(read[i], snapshot && i + 1 == read.size());
    if (stopping && !trainer.done()) {
      checkpoint();
      recorder.stopped(trainer);
      return RunEnd::Stopped;
    }
    if (checkpoint_due) checkpoint();
  }
  checkpoint();
  // The model is kept before anything that could fail after training (its evaluation, a
  // sample's decoding) runs: a finished run is never lost to what comes after.
  TrainResult r = trainer.end_training();
  recorder.trained(trainer, r);
  trainer.evaluate(r);
  recorder.finished(trainer, r);
  if (result) *result = std::move(r);
  return RunEnd::Finished;
}

}  // namespace fp8lm
