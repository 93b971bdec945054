// Non-finite steps (issue 12, point 1) on the CPU: a step whose loss or gradients are not finite
// is skipped and leaves everything as it was; too many in a row stop the run with an error
// naming the step and the tensor; the skips are counted through a checkpoint; a model with a
// non-finite weight is neither written nor loaded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "demo_config.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "run_util.h"
#include "safetensors_edit.h"
#include "skip_check.h"

namespace fp8lm {
namespace {

TrainConfig tiny(Precision p) {
  TrainConfig c = test::small_stride_demo();
  c.precision = p;
  c.recipe.delayed.amax_history_len = 4;
  c.steps = 20;
  c.evaluate = false;
  return c;
}

TEST(NonFiniteStep, IsSkippedLeavingWeightsMomentsAndFp8StateAsTheyWere) {
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp8}) {
    for (bool fusion : {true, false}) {
      SCOPED_TRACE(testing::Message() << precision_name(p) << (fusion ? " fused" : " unfused"));
      TrainConfig c = tiny(p);
      c.fusion = fusion;
      test::expect_poisoned_step_is_skipped(c);
    }
  }
  TrainConfig current = tiny(Precision::Fp8);
  current.recipe.kind = ScalingKind::Current;
  SCOPED_TRACE("fp8 current scaling");
  test::expect_poisoned_step_is_skipped(current);
}

// Issue 34: steps decided on the backend and read together, on the CPU (whose run loop reads
// every step, but whose trainer launches and reads as a GPU's does): the bits of steps read
// as they end, a skipped one among them, in every precision and with two micro-batches.
TEST(NonFiniteStep, StepsReadTogetherMatchStepsReadAsTheyEnd) {
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp8}) {
    for (const int64_t micro_batches : {1, 2}) {
      SCOPED_TRACE(testing::Message() << precision_name(p) << ", micro-batches " << micro_batches);
      TrainConfig c = tiny(p);
      c.grad_accum = micro_batches;
      c.fp8_fallback = false;
      test::expect_steps_read_later_match_steps_read_as_they_end(c);
    }
  }
}

void poison(Parameter& p) {
  std::vector<float> v = p.values();
  v[0] = INFINITY;
  p.set_values(v);
}

TEST(NonFiniteStep, TooManyInARowStopTheRunNamingTheStepAndTheTensor) {
  TrainConfig c = tiny(Precision::Fp8);
  c.max_skipped_steps = 3;
  Trainer t(c);
  t.train_step();
  t.train_step();
  poison(*t.model().parameters()[0]);  // wte
  EXPECT_TRUE(t.train_step().skipped);
  EXPECT_TRUE(t.train_step().skipped);
  try {
    t.train_step();
    FAIL() << "the third skip in a row must stop the run";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 5: 3 steps in a row skipped"), std::string::npos) << m;
    EXPECT_NE(m.find("from step 3: the weight wte is not finite"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
  }
}

TEST(NonFiniteStep, AnInfiniteLossFromFiniteWeightsIsNamed) {
  TrainConfig c = tiny(Precision::Fp32);
  c.max_skipped_steps = 1;
  Trainer t(c);
  t.train_step();
  // A huge (finite) gain on the final norm: the logits overflow, the loss is not finite.
  Parameter& gain = *t.model().parameters()[t.model().parameters().size() - 2];
  std::vector<float> g = gain.values();
  for (float& x : g) x = 3e38f;
  gain.set_values(g);
  try {
    t.train_step();
    FAIL() << "an infinite loss must be skipped, and one skip is the limit here";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 2: 1 steps in a row skipped"), std::string::npos) << m;
    EXPECT_NE(m.find("the loss is"), std::string::npos) << m;
  }
}

TEST(NonFiniteStep, SkipsAreCountedThroughACheckpoint) {
  const std::string dir = test::fresh_dir("skips_resume");
  Trainer t(tiny(Precision::Fp32));
  t.train_step();
  Parameter& w = t.model().layer(1).mlp().fc2().weight();
  const std::vector<float> good = w.values();
  poison(w);
  t.train_step();
  w.set_values(good);
  t.train_step();
  ASSERT_EQ(t.skipped_steps(), 1);
  save_trainer(t, dir);
  const std::unique_ptr<Trainer> resumed = resume_trainer(dir);
  EXPECT_EQ(resumed->skipped_steps(), 1);
  const StepStats s = resumed->train_step();
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_FALSE(s.skipped);
  // The model file says so, for inspect.
  EXPECT_EQ(Safetensors::read(dir + "/model.safetensors").metadata().at("skipped_steps"), "1");
}

TEST(NonFiniteModel, IsNeverWritten) {
  Trainer t(tiny(Precision::Fp32));
  t.train_step();
  poison(t.model().layer(0).attention().proj().weight());
  const std::string path = test::fresh_dir("nonfinite_write") + ".safetensors";
  try {
    trainer_model_file(t).write(path);
    FAIL() << "a model with an infinite weight must not be written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.proj.weight is not finite"), std::string::npos)
        << e.what();
  }
  // The write stopped at that tensor and left nothing: no file, no temporary.
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// Overwrites the first element of tensor `name` in a safetensors file with `value`, and drops
// the checksums that would refuse the file first (as a file from another tool has none).
void patch_first_value(const std::string& path, const std::string& name, float value) {
  std::vector<uint8_t> bytes = test::read_bytes(path);
  std::memcpy(bytes.data() + test::data_offset(bytes, name), &value, sizeof(value));
  test::without_checksums(bytes);
  test::write_bytes(path, bytes);
}

TEST(NonFiniteModel, IsRefusedOnLoad) {
  const std::string dir = test::fresh_dir("nonfinite_load");
  std::filesystem::create_directories(dir);
  Trainer t(tiny(Precision::Fp32));
  t.train_step();
  const std::string path = dir + "/model.safetensors";
  trainer_model_file(t).write(path);
  ASSERT_NO_THROW(load_model(path));
  patch_first_value(path, "layers.1.fc1.weight", NAN);
  try {
    load_model(path);
    FAIL() << "a model file holding a NaN weight must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layers.1.fc1.weight' holds values that are not finite"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp8lm
