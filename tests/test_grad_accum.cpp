// Gradient accumulation (issue 13, --grad-accum K): K micro-batches of --batch-size sequences
// per optimizer step train like one batch K times as large, and under FP8 each weight is cast
// once per step, by the first micro-batch (TE's is_first_microbatch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "train/trainer.h"

namespace fp8lm {
namespace {

TrainConfig tiny(Precision p, int64_t batch, int64_t accum) {
  TrainConfig c;
  c.model = {.vocab = 32, .seq_len = 16, .d_model = 64, .n_layers = 2, .n_heads = 4, .ffn = 128};
  c.precision = p;
  c.steps = 20;
  c.batch_size = batch;
  c.grad_accum = accum;
  c.threads = 1;
  c.warmup = 4;
  c.evaluate = false;
  return c;
}

std::vector<float> losses_of(const TrainConfig& c) {
  Trainer t(c, single_process());
  while (!t.done()) t.train_step();
  return t.losses();
}

// FP32: the same 16 sequences per step; the gradients are summed in another order (two GEMMs
// adding into them rather than one), so the losses agree within a few FP32 roundings (1e-6
// relative, as the issue asks).
TEST(GradAccum, TwoMicroBatchesTrainLikeTheBatchDoubled) {
  const std::vector<float> doubled = losses_of(tiny(Precision::Fp32, 16, 1));
  const std::vector<float> accumulated = losses_of(tiny(Precision::Fp32, 8, 2));
  ASSERT_EQ(accumulated.size(), doubled.size());
  for (size_t s = 0; s < doubled.size(); ++s)
    EXPECT_NEAR(accumulated[s], doubled[s], 1e-6 * std::abs(doubled[s])) << "step " << s + 1;
}

// FP8 delayed scaling with a history longer than the run: a slot's history takes an entry at
// each forward scope in which it recorded an amax (a scope that cast nothing through it leaves
// it as it was). With K = 2 an input slot takes two entries per step (each micro-batch casts its
// own input) and a weight slot one (the second micro-batch reuses the first's cast). The losses
// stay within the FP8 noise of the batch-doubled run (2%, as between FP8 and FP32 here).
TEST(GradAccum, Fp8CastsEachWeightOncePerStep) {
  TrainConfig c = tiny(Precision::Fp8, 8, 2);
  c.recipe.delayed.amax_history_len = 64;
  Trainer t(c, single_process());
  while (!t.done()) t.train_step();
  const std::vector<float> doubled = [&] {
    TrainConfig d = tiny(Precision::Fp8, 16, 1);
    d.recipe.delayed.amax_history_len = 64;
    return losses_of(d);
  }();
  for (size_t s = 0; s < doubled.size(); ++s)
    EXPECT_NEAR(t.losses()[s], doubled[s], 0.02 * doubled[s]) << "step " << s + 1;

  const auto entries = [](const std::vector<float>& history) {
    return std::count_if(history.begin(), history.end(), [](float a) { return a > 0.0f; });
  };
  const std::vector<Fp8Meta> metas = t.model().fp8_state();
  ASSERT_FALSE(metas.empty());
  for (const Fp8Meta& m : metas) {
    EXPECT_EQ(entries(m[Slot::Weight].amax_history), c.steps);
    EXPECT_EQ(entries(m[Slot::Input].amax_history), 2 * c.steps);
  }
}

TEST(GradAccum, ZeroMicroBatchesAreRefused) {
  try {
    Trainer t(tiny(Precision::Fp32, 8, 0), single_process());
    FAIL() << "a step of no micro-batches trained";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--grad-accum 0 must be positive");
  }
}

}  // namespace
}  // namespace fp8lm
