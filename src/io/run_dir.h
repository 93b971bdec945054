#pragma once
// A run directory: config.json, metrics.jsonl (a line per step; every N steps a snapshot of
// every FP8 slot), checkpoints/step-NNNNNN/ (the last K, `latest` naming the newest complete
// one), and at the end model.safetensors, summary.json and report.html.
#include <atomic>
#include <string>

#include "train/trainer.h"

namespace fp8lm {

struct RunOptions {
  std::string dir;
  int64_t checkpoint_every = 0;  // 0: only at the end or when stopped
  int keep = 3;                  // checkpoints kept
  int64_t stop_after = 0;  // stop (with a checkpoint) after this step, as an interruption would
  int64_t fp8_snapshot_every = 10;
  int64_t val_every = 20;  // held-out loss in metrics.jsonl every N steps (0: never)
};

enum class RunEnd { Finished, Stopped };

// Trains until done, a stop request (checked between steps), or stop_after. A stopped run
// leaves a checkpoint to resume from; a finished one also writes model.safetensors and
// summary.json. `result` receives the summary when finished.
RunEnd run_training(Trainer& trainer, const RunOptions& opts, const ProgressFn& progress,
                    const std::atomic<bool>* stop, TrainResult* result);

// The newest complete checkpoint directory of a run; Error when there is none.
std::string latest_checkpoint(const std::string& run_dir);

void write_summary(const std::string& dir, const Trainer& trainer, const TrainResult& r);

}  // namespace fp8lm
