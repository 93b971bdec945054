#pragma once
// Helpers for tests that train into run directories.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/run_dir.h"
#include "train/run_loop.h"

namespace fp8lm::test {

// An empty path under the test temp dir (whatever an earlier run left there is removed).
inline std::string fresh_dir(const std::string& name) {
  const std::string d = testing::TempDir() + "fp8lm_test_" + name;
  std::filesystem::remove_all(d);
  return d;
}

// run_training with a run directory as its recorder, as `fp8lm train --out dir` does.
inline RunEnd train_in_dir(Trainer& trainer, const std::string& dir, const RunSchedule& schedule,
                           TrainResult* result = nullptr, int keep_checkpoints = 3) {
  RunDirectory run(dir, trainer, {schedule.checkpoint_every, keep_checkpoints});
  return run_training(trainer, schedule, run, {}, nullptr, result);
}

}  // namespace fp8lm::test
