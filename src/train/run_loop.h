#pragma once
// The outer training loop: steps until done, a stop request (checked between steps) or
// stop_after, with held-out loss, FP8 snapshots and checkpoints on a schedule. What a run
// leaves behind (files, logs) is the recorder's business: io/run_dir.h writes a run directory.
#include <atomic>
#include <cstdint>
#include <optional>

#include "train/trainer.h"

namespace fp8lm {

struct RunSchedule {
  int64_t checkpoint_every = 0;  // 0: only at the end or when stopped
  int64_t stop_after = 0;  // stop (with a checkpoint) after this step, as an interruption would
  int64_t fp8_snapshot_every = 10;  // and at step 1
  int64_t val_every = 20;           // held-out loss every N steps and at the last (0: never)
  // On a GPU, the steps launched before their figures are read (issue 34: the host does not
  // wait for each step); the progress and metrics.jsonl follow at each read. Steps whose state
  // is recorded, validated, checkpointed or stopped at are read at once; the CPU reads every
  // step (its reads cost nothing). At most Trainer::kMaxUnreadSteps.
  int64_t steps_between_reads = 16;
};

// One step as the recorder sees it.
struct StepRecord {
  StepStats stats;            // with val_loss when the schedule measured it
  bool fp8_snapshot = false;  // the FP8 state is due to be recorded (fp8 runs)
};

class RunRecorder {
 public:
  virtual ~RunRecorder() = default;
  virtual void step(Trainer& trainer, const StepRecord& record) = 0;
  virtual void checkpoint(Trainer& trainer) = 0;
  // The run stops with a checkpoint written before (resumable) ...
  virtual void stopped(Trainer& trainer) = 0;
  // ... or ends: the checkpoint, the trained model (before its evaluation, which could fail),
  // then the evaluation's result.
  virtual void trained(Trainer& trainer, const TrainResult& result) = 0;
  virtual void finished(Trainer& trainer, const TrainResult& result) = 0;
};

// The held-out loss after `step`, when the schedule measures it (every val_every steps and after
// the last): `fp8lm train` and the library's Training::step both take it, so that their runs
// (whose FP8 forward scales the held-out passes update) stay the same run.
std::optional<double> scheduled_validation(Trainer& trainer, const RunSchedule& schedule,
                                           int64_t step);

enum class RunEnd { Finished, Stopped };

// `result` receives the evaluation when finished.
RunEnd run_training(Trainer& trainer, const RunSchedule& schedule, RunRecorder& recorder,
                    const ProgressFn& progress, const std::atomic<bool>* stop, TrainResult* result);

}  // namespace fp8lm
