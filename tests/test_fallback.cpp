// The automatic per-GEMM BF16 fallback (issue 12, point 2) on the CPU: a GEMM whose FP8 output
// goes non-finite moves to BF16 at the skipped step (tests/fallback_check.h); a GEMM whose
// slot keeps saturating moves after kFallbackSaturatedSteps steps in a row; the record is in
// the model file, survives a checkpoint bit for bit, and is shown by metrics, summary, report
// and inspect (tests/test_cli.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "demo_config.h"
#include "fallback_check.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "run_util.h"
#include "skip_check.h"

namespace fp8lm {
namespace {

TEST(Fp8Fallback, ANonFiniteFp8OutputMovesItsGemmToBf16AndTheRunFinishes) {
  test::expect_fallback_survives_a_corrupted_scale(test::small_stride_demo());
}

// The user's way to the same: --margin 100 makes every scale 2^-100 too small; on the CPU the
// two scale_invs' product overflows and the dequantized output is 0 x Inf = NaN from step 2
// (the GPU backend applies the two scales one after the other and gets zeros instead). Every
// GEMM falls back at the first skipped step and the run finishes.
TEST(Fp8Fallback, AMarginCollapseIsSurvivedOnTheCpu) {
  TrainConfig c = test::small_stride_demo();
  c.precision = Precision::Fp8;
  c.recipe.delayed.margin = 100;
  c.steps = 10;
  c.max_skipped_steps = 4;
  c.evaluate = false;
  c.fp8_fallback = false;
  {
    Trainer off(c);
    EXPECT_THROW(
        {
          while (!off.done()) off.train_step();
        },
        SkipLimitReached);
  }
  c.fp8_fallback = true;
  Trainer t(c);
  while (!t.done()) t.train_step();
  EXPECT_EQ(t.skipped_steps(), 1);
  EXPECT_EQ(t.fp8_fallbacks().size(), t.model().linears().size());
  for (const Fp8Fallback& f : t.fp8_fallbacks()) EXPECT_EQ(f.step, 2) << f.gemm;
  EXPECT_TRUE(std::isfinite(t.finish().final_loss));
}

TrainConfig saturating() {
  TrainConfig c = test::small_stride_demo();
  c.precision = Precision::Fp8;
  c.recipe.delayed.amax_history_len = 4;
  c.steps = kFallbackSaturatedSteps + 4;
  c.evaluate = false;
  return c;
}

// A scripted scale error: before every step, layers.0.fc1's weight scale is made 8 times too
// large, as a delayed scale is when the weight's amax has jumped, so the larger weights clamp
// to the format's max (far more than 1% of them) in every step.
void overscale_fc1_weight(Trainer& t) {
  Linear& fc1 = t.model().layer(0).mlp().fc1();
  Fp8Meta m = fc1.fp8_meta();
  m[Slot::Weight].scale *= 8;
  m[Slot::Weight].scale_inv /= 8;
  fc1.set_fp8_meta(m);
}

TEST(Fp8Fallback, AGemmThatKeepsSaturatingMovesToBf16AfterItsWindow) {
  for (bool fallback : {true, false}) {
    SCOPED_TRACE(fallback ? "auto" : "off");
    TrainConfig c = saturating();
    c.fp8_fallback = fallback;
    Trainer t(c);
    int64_t fell_at = 0;
    while (!t.done()) {
      overscale_fc1_weight(t);
      const StepStats s = t.train_step();
      for (const Fp8Fallback& f : s.fp8_fallbacks) {
        EXPECT_EQ(f.gemm, "layers.0.fc1");
        EXPECT_EQ(f.slot, "weight");
        EXPECT_NE(f.reason.find("saturated in each of 16 steps"), std::string::npos) << f.reason;
        fell_at = s.step;
      }
    }
    // Step 1 casts with the initial scale of 1 (no amax seen yet): nothing saturates, even 8
    // times over. Steps 2..17 saturate: the 16th of them falls back.
    EXPECT_EQ(fell_at, fallback ? kFallbackSaturatedSteps + 1 : 0);
    EXPECT_EQ(t.model().layer(0).mlp().fc1().fell_back_to_bf16(), fallback);
    // Only the scripted GEMM: the others' slots saturate far below 1%.
    EXPECT_EQ(t.fp8_fallbacks().size(), fallback ? 1u : 0u);
  }
}

// The saturation streak and the fallbacks are part of the checkpoint: stopped half way through
// the streak and resumed, the run falls back at the same step and ends bit for bit the same.
TEST(Fp8Fallback, SurvivesACheckpointBitForBit) {
  const TrainConfig c = saturating();
  Trainer straight(c);
  while (!straight.done()) {
    overscale_fc1_weight(straight);
    straight.train_step();
  }
  const std::string dir = test::fresh_dir("fallback_resume");
  {
    Trainer first(c);
    for (int i = 0; i < 8; ++i) {
      overscale_fc1_weight(first);
      first.train_step();
    }
    save_trainer(first, dir);
  }
  const std::unique_ptr<Trainer> resumed = resume_trainer(dir);
  while (!resumed->done()) {
    overscale_fc1_weight(*resumed);
    resumed->train_step();
  }
  ASSERT_EQ(resumed->fp8_fallbacks().size(), 1u);
  EXPECT_EQ(resumed->fp8_fallbacks()[0].step, straight.fp8_fallbacks().at(0).step);
  test::TrainerState(*resumed).expect_equal(test::TrainerState(straight));
  // A model file carries the fallback into inference: its GEMM runs in BF16 there too.
  const std::string model = dir + "/final.safetensors";
  trainer_model_file(*resumed).write(model);
  const LoadedModel m = load_model(model);
  EXPECT_TRUE(m.model->layer(0).mlp().fc1().fell_back_to_bf16());
  EXPECT_FALSE(m.model->layer(0).mlp().fc2().fell_back_to_bf16());
  // And onto another backend (a run resumed on a GPU, a model generating on one): GPT::to.
  const std::unique_ptr<GPT> moved = m.model->to(m.model->backend());
  EXPECT_TRUE(moved->layer(0).mlp().fc1().fell_back_to_bf16());
  EXPECT_FALSE(moved->layer(0).mlp().fc2().fell_back_to_bf16());
}

}  // namespace
}  // namespace fp8lm
