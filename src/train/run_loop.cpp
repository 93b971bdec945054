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
  while (!trainer.done()) {
    StepRecord record;
    // The steps whose FP8 state is recorded (below) record their block scales too.
    const int64_t next = trainer.steps_done() + 1;
    const bool snapshot = fp8 && (next % std::max<int64_t>(1, schedule.fp8_snapshot_every) == 0 ||
                                  next == 1 || next == trainer.config().steps);
    trainer.collect_block_stats(snapshot);
    try {
      record.stats = trainer.train_step();
      trainer.collect_block_stats(false);
    } catch (const SkipLimitReached& e) {  // the stopping step is recorded, then the run ends
      record.stats = e.stats;
      recorder.step(trainer, record);
      if (progress) progress(record.stats);
      throw;
    }
    const int64_t step = record.stats.step;
    record.stats.val_loss = scheduled_validation(trainer, schedule, step);
    record.fp8_snapshot = snapshot;
    recorder.step(trainer, record);
    if (progress) progress(record.stats);
    // A signal reaches the ranks at different moments: they agree on it, so all stop after the
    // same step.
    const bool stopping = trainer.any_rank(stop && stop->load()) ||
                          (schedule.stop_after > 0 && step >= schedule.stop_after);
    if (stopping && !trainer.done()) {
      checkpoint();
      recorder.stopped(trainer);
      return RunEnd::Stopped;
    }
    if (schedule.checkpoint_every > 0 && step % schedule.checkpoint_every == 0 && !trainer.done()) {
      checkpoint();
    }
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
