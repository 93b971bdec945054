// A user's first program against <fp8lm/fp8lm.h>: TE-style delayed scaling of one GEMM's
// input over a few steps, reading back the state a TE user would read from fp8_meta.
#include <fp8lm/fp8lm.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

TEST(PublicApi, DelayedScalingOfOneGemmInput) {
  const fp8lm::DelayedScaling recipe{.format = fp8lm::Format::Hybrid, .amax_history_len = 16};
  recipe.validate();
  fp8lm::Fp8Meta meta(recipe);
  fp8lm::Fp8Meta* metas[] = {&meta};
  std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<uint8_t> q(x.size());
  for (int step = 0; step < 3; ++step) {
    meta[fp8lm::Slot::Input].cast(q.data(), x.data(), static_cast<int64_t>(x.size()));
    fp8lm::update_delayed_scaling(metas, fp8lm::Direction::Forward, recipe);
  }
  const fp8lm::ScalingState& input = meta[fp8lm::Slot::Input];
  EXPECT_EQ(input.scale, 224.0f);  // 448 / amax 2
  EXPECT_EQ(input.amax_history.size(), 16u);
  EXPECT_EQ(input.amax_history.back(), 2.0f);
  // With that scale the cast is exact for these values: dequantize gives x back.
  std::vector<float> back(x.size());
  fp8lm::dequantize(back.data(), q.data(), static_cast<int64_t>(q.size()), input.scale_inv,
                    input.format);
  EXPECT_EQ(back, x);
}

}  // namespace
