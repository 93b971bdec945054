// The library as a user sees it: only <fp8lm/fp8lm.h> (tests/install_test.sh checks that an
// installed copy builds with nothing else on the include path).
#include <fp8lm/fp8lm.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace {

fp8lm::TrainConfig tiny_fp8_run() {
  fp8lm::TrainConfig c;
  c.model = {.vocab = 32, .seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 2, .ffn = 64};
  c.precision = fp8lm::Precision::Fp8;
  c.recipe.delayed.amax_history_len = 4;
  c.steps = 6;
  c.batch_size = 4;
  c.threads = 1;
  c.eval_prompts = 4;
  return c;
}

std::string temp_path(const std::string& name) {
  const std::string p = testing::TempDir() + "fp8lm_api_" + name;
  std::filesystem::remove_all(p);
  return p;
}

TEST(PublicApi, TrainsShowsFp8StateAndResumesBitForBit) {
  fp8lm::Training straight(tiny_fp8_run());
  std::vector<float> losses;
  while (!straight.done()) {
    const fp8lm::StepStats s = straight.step();
    losses.push_back(s.loss);
    // The held-out loss where `fp8lm train` measures it: every 20th step and the last.
    EXPECT_EQ(s.val_loss.has_value(), s.step == 6) << s.step;
  }
  // Every GEMM (qkv, proj, fc1, fc2 per layer) with its five slots; the delayed-scaling
  // updates moved the input slots' scales away from step 1's 1.
  const std::vector<fp8lm::Fp8SlotState> state = straight.fp8_state();
  ASSERT_EQ(state.size(), 2u * 4u * 5u);
  EXPECT_EQ(state[0].gemm, "layers.0.qkv");
  EXPECT_EQ(state[0].slot, "input");
  EXPECT_NE(state[0].scale, 1.0f);
  EXPECT_EQ(state[0].amax_history.size(), 4u);
  EXPECT_EQ(state[0].scale_inv, 1.0f / state[0].scale);

  fp8lm::Training first(tiny_fp8_run());
  for (int i = 0; i < 3; ++i) first.step();
  const std::string dir = temp_path("ckpt");
  first.save_checkpoint(dir);
  fp8lm::Training resumed = fp8lm::Training::resume(dir);
  for (size_t i = 3; i < losses.size(); ++i) EXPECT_EQ(resumed.step().loss, losses[i]) << i;
  EXPECT_TRUE(resumed.done());
}

TEST(PublicApi, SavedModelLoadsAndGenerates) {
  fp8lm::Training run(tiny_fp8_run());
  while (!run.done()) run.step();
  const std::string path = temp_path("model.safetensors");
  run.save_model(path);
  fp8lm::Model model = fp8lm::Model::load(path);
  EXPECT_EQ(model.config().model.d_model, 32);
  EXPECT_EQ(model.fp8_state().size(), run.fp8_state().size());
  const std::vector<int32_t> prompts = {1, 2, 3, 4, 5, 6};  // two prompts of three tokens
  const std::vector<int32_t> out = model.generate(prompts, 3, 5);
  ASSERT_EQ(out.size(), 10u);
  for (int32_t t : out) EXPECT_TRUE(t >= 0 && t < 32) << t;
  EXPECT_THROW(model.generate(prompts, 4, 1), fp8lm::Error);
}

TEST(PublicApi, BadSettingsAndFilesAreErrors) {
  fp8lm::TrainConfig c = tiny_fp8_run();
  c.model.n_heads = 3;  // does not divide d_model 32
  EXPECT_THROW(fp8lm::Training{c}, fp8lm::Error);
  EXPECT_THROW(fp8lm::Model::load(temp_path("missing.safetensors")), fp8lm::Error);
  EXPECT_THROW(fp8lm::Training::resume(temp_path("no_checkpoint")), fp8lm::Error);
}

}  // namespace
