#pragma once
// The automatic BF16 fallback (issue 12, point 2) on every device, on a reproducible case: a
// test corrupts one GEMM's FP8 input scale (NaN, as a scale update that did not survive an amax
// spike would leave it) before step 3. Its FP8 output is NaN from then on, and since a skipped
// step rolls the scaling state back to what it was before the step, the corruption stays.
// Without the fallback every later step is skipped and the run stops; with it, the skipped
// step's diagnosis finds that GEMM's FP8 output non-finite, moves it (and only it) to BF16, and
// the run finishes with a finite loss.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/trainer.h"

namespace fp8lm::test {

inline void corrupt_fc1_input_scale(Trainer& t) {
  Linear& fc1 = t.model().layer(0).mlp().fc1();
  Fp8Meta m = fc1.fp8_meta();
  m[Slot::Input].scale = std::numeric_limits<float>::quiet_NaN();
  m[Slot::Input].scale_inv = std::numeric_limits<float>::quiet_NaN();
  fc1.set_fp8_meta(m);
}

// Runs c (as FP8, 12 steps, stopping after 4 skips in a row), corrupting the scale before step 3.
inline void run_with_corrupted_scale(Trainer& t) {
  while (!t.done()) {
    if (t.steps_done() == 2) corrupt_fc1_input_scale(t);
    t.train_step();
  }
}

inline TrainConfig corrupted_scale_run(TrainConfig c, bool fallback) {
  c.precision = Precision::Fp8;
  c.steps = 12;
  c.max_skipped_steps = 4;
  c.evaluate = false;
  c.fp8_fallback = fallback;
  return c;
}

inline void expect_fallback_survives_a_corrupted_scale(const TrainConfig& base) {
  {
    Trainer off(corrupted_scale_run(base, false));
    EXPECT_THROW(run_with_corrupted_scale(off), SkipLimitReached)
        << "without the fallback the run does not survive";
  }
  Trainer t(corrupted_scale_run(base, true));
  run_with_corrupted_scale(t);
  EXPECT_EQ(t.skipped_steps(), 1) << "one skipped step, then layers.0.fc1 runs in BF16";
  ASSERT_EQ(t.fp8_fallbacks().size(), 1u);
  const Fp8Fallback& f = t.fp8_fallbacks()[0];
  EXPECT_EQ(f.gemm, "layers.0.fc1");
  EXPECT_EQ(f.slot, "output");
  EXPECT_EQ(f.reason, "non-finite FP8 output");
  EXPECT_EQ(f.step, 3);
  for (Linear* l : t.model().linears())
    EXPECT_EQ(l->fell_back_to_bf16(), l->name() == "layers.0.fc1") << l->name();
  const TrainResult r = t.finish();
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_TRUE(std::isfinite(r.losses.back()));
}

}  // namespace fp8lm::test
