// Delayed and current scaling against docs/reference/numerics.md's update rule: a literal
// hand-worked sequence, then long scripted sequences checked against a sliding-window model of
// the rule for every history length, algorithm, margin and format the issue names.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <deque>
#include <random>
#include <vector>

#include "fp8/quantize.h"
#include "fp8/scaling.h"
#include "fp8lm/error.h"
#include "nn/scaling_store.h"

namespace fp8lm {
namespace {

std::vector<float> history(const ScalingState& s) {
  return s.amax_history;
}

TEST(DelayedScaling, HandWorkedSequenceLength4) {
  ScalingState s(DType::E4M3, 4);
  const DelayedScaling r{.margin = 0, .format = Format::E4M3, .amax_history_len = 4};
  EXPECT_EQ(s.scale, 1.0f);  // step 1 uses scale 1
  s.record_amax(2.0f);
  update_delayed_scaling(s, r);
  EXPECT_EQ(history(s), (std::vector<float>{0, 0, 0, 2}));
  EXPECT_EQ(s.scale, 224.0f);
  EXPECT_EQ(s.scale_inv, 1.0f / 224.0f);
  s.record_amax(4.0f);
  s.record_amax(3.0f);  // max-accumulates within a step
  update_delayed_scaling(s, r);
  EXPECT_EQ(history(s), (std::vector<float>{0, 0, 2, 4}));
  EXPECT_EQ(s.scale, 112.0f);
  s.record_amax(1.0f);
  update_delayed_scaling(s, r);
  EXPECT_EQ(history(s), (std::vector<float>{0, 2, 4, 1}));
  EXPECT_EQ(s.scale, 112.0f);
  update_delayed_scaling(s, r);  // the module did not run: no roll, scale from the same window
  EXPECT_EQ(history(s), (std::vector<float>{0, 2, 4, 1}));
  EXPECT_EQ(s.scale, 112.0f);
  s.record_amax(0.5f);
  update_delayed_scaling(s, r);
  EXPECT_EQ(history(s), (std::vector<float>{0, 4, 1, 0.5f}));
  s.record_amax(0.5f);
  update_delayed_scaling(s, r);
  EXPECT_EQ(history(s), (std::vector<float>{0, 1, 0.5f, 0.5f}));
  EXPECT_EQ(s.scale, 112.0f);  // 4 was still in the window when the max was taken
  s.record_amax(0.5f);
  update_delayed_scaling(s, r);
  EXPECT_EQ(s.scale, 448.0f);  // now the window's max is 1
  s.record_amax(INFINITY);
  update_delayed_scaling(s, r);
  EXPECT_EQ(s.scale, 448.0f);                  // Inf keeps the scale...
  EXPECT_EQ(s.amax_history.back(), INFINITY);  // ...and stays in the window
  s.record_amax(NAN);
  update_delayed_scaling(s, r);
  EXPECT_EQ(s.scale, 448.0f);
  EXPECT_TRUE(std::isnan(s.amax_history.back()));
}

TEST(DelayedScaling, ScaleValuesMarginsAndOverflow) {
  EXPECT_EQ(compute_scale(2.0f, 448.0f, 0, 1.0f), 224.0f);
  EXPECT_EQ(compute_scale(2.0f, 448.0f, 2, 1.0f), 56.0f);
  EXPECT_EQ(compute_scale(2.0f, 57344.0f, 0, 1.0f), 28672.0f);
  EXPECT_EQ(compute_scale(2.0f, 57344.0f, 2, 1.0f), 7168.0f);
  EXPECT_EQ(compute_scale(0.0f, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(compute_scale(INFINITY, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(compute_scale(NAN, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(compute_scale(-1.0f, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(compute_scale(1e-39f, 448.0f, 0, 1.0f), FLT_MAX);  // 4.5e41 overflows float
  EXPECT_EQ(compute_scale(FLT_TRUE_MIN, 57344.0f, 2, 1.0f), FLT_MAX);
  EXPECT_EQ(compute_scale(FLT_MAX, 448.0f, 30, 1.0f), FLT_MIN);  // underflow keeps scale_inv finite
  ScalingState s(DType::E4M3, 1);
  s.set_scale(FLT_MAX);
  EXPECT_GT(s.scale_inv, 0.0f);
  EXPECT_TRUE(std::isfinite(s.scale_inv));
}

// The rule restated as a sliding window: history = [current, window...] where window holds
// the last len-1 amaxes of steps that ran; max is taken over the current and the window.
struct WindowModel {
  int len;
  std::deque<float> window;  // oldest first
  float scale = 1.0f;

  static float nan_max(float a, float b) {
    return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  }

  void update(float current, const DelayedScaling& r, float fp8_max_value) {
    float amax = current;
    if (r.amax_compute_algo == AmaxComputeAlgo::Max)
      for (float w : window) amax = nan_max(amax, w);
    if (current != 0.0f && len > 1) {
      window.push_back(current);
      if (static_cast<int>(window.size()) > len - 1) window.pop_front();
    }
    if (std::isfinite(amax) && amax > 0.0f) {
      scale = fp8_max_value / amax / static_cast<float>(1 << r.margin);
      if (std::isinf(scale)) scale = FLT_MAX;
    }
  }
  std::vector<float> history() const {
    std::vector<float> h(len, 0.0f);
    std::copy(window.begin(), window.end(), h.end() - static_cast<long>(window.size()));
    return h;
  }
};

std::vector<float> scripted_amaxes() {
  std::vector<float> v = {2, 4, 1, 0, 0.5f, INFINITY, 3, NAN, 1e-39f, 0, 8, 16, 0, 0.25f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-8.0f, 8.0f);
  for (int i = 0; i < 1100; ++i) v.push_back(i % 37 == 0 ? 0.0f : std::exp2(mag(rng)));
  return v;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

TEST(DelayedScaling, ScriptedSequencesMatchTheWindowModel) {
  const auto amaxes = scripted_amaxes();
  for (int len : {1, 4, 1024}) {
    for (AmaxComputeAlgo algo : {AmaxComputeAlgo::Max, AmaxComputeAlgo::MostRecent}) {
      for (int margin : {0, 2}) {
        for (Format format : {Format::E4M3, Format::Hybrid}) {
          const DelayedScaling r{.margin = margin,
                                 .format = format,
                                 .amax_history_len = len,
                                 .amax_compute_algo = algo};
          Fp8Meta meta(r);
          // The backward grad_output slot: E5M2 under HYBRID, E4M3 under E4M3.
          ScalingState& slot = meta[Slot::GradOutput];
          WindowModel model{len, {}};
          const float max_value = fp8_max(slot.format);
          for (size_t step = 0; step < amaxes.size(); ++step) {
            slot.record_amax(amaxes[step]);
            for (ScalingState& st : meta.slots(Direction::Backward)) update_delayed_scaling(st, r);
            model.update(amaxes[step], r, max_value);
            const auto where = testing::Message()
                               << "len " << len << " algo " << amax_compute_algo_name(algo)
                               << " margin " << margin << " " << format_name(format) << " step "
                               << step;
            ASSERT_TRUE(same_floats(slot.amax_history, model.history())) << where;
            ASSERT_EQ(slot.scale, model.scale) << where;
            ASSERT_EQ(slot.scale_inv, 1.0f / model.scale) << where;
          }
          EXPECT_EQ(meta[Slot::Input].scale, 1.0f)
              << "forward slots untouched by a backward update";
        }
      }
    }
  }
}

// The model's scaling store (nn/scaling_store.h) hands one direction's newest amaxes to the
// reducer in slot order, then updates from the reduced values.
TEST(DelayedScaling, AmaxesAreReducedAcrossProcessesBeforeTheUpdate) {
  const DelayedScaling r{.format = Format::Hybrid, .amax_history_len = 2};
  ScalingStore store(cpu_backend(), 2, r);
  const auto record = [&](int gemm, Slot s, float amax) {
    Fp8Meta m = store.meta(gemm);
    m[s].record_amax(amax);
    store.set_meta(gemm, m);
  };
  record(0, Slot::Input, 1.0f);
  record(1, Slot::Weight, 2.0f);
  int calls = 0;
  // Another rank saw 4 for GEMM 0's input and 0.5 for GEMM 1's weight.
  const AmaxReducer remote = [&](std::span<float> amaxes) {
    ++calls;
    ASSERT_EQ(amaxes.size(), 6u);  // 3 forward slots per GEMM
    const float other[] = {4.0f, 0, 0, 0, 0.5f, 0};
    for (size_t i = 0; i < amaxes.size(); ++i) amaxes[i] = std::max(amaxes[i], other[i]);
  };
  store.update(Direction::Forward, r, remote);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(store.meta(0)[Slot::Input].scale, 112.0f);   // 448 / 4
  EXPECT_EQ(store.meta(1)[Slot::Weight].scale, 224.0f);  // 448 / 2
  DelayedScaling local = r;
  local.reduce_amax = false;
  record(0, Slot::Input, 1.0f);
  store.update(Direction::Forward, local, remote);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(store.meta(0)[Slot::Input].scale, 112.0f);  // window still holds the reduced 4
}

TEST(Fp8Meta, SlotFormatsFollowTheRecipe) {
  Fp8Meta hybrid(Format::Hybrid, 16), e4m3(Format::E4M3, 16);
  for (Slot s : {Slot::Input, Slot::Weight, Slot::Output}) {
    EXPECT_EQ(hybrid[s].format, DType::E4M3);
    EXPECT_EQ(hybrid[s].amax_history.size(), 16u);
  }
  for (Slot s : {Slot::GradOutput, Slot::GradInput}) {
    EXPECT_EQ(hybrid[s].format, DType::E5M2);
    EXPECT_EQ(e4m3[s].format, DType::E4M3);
  }
  EXPECT_EQ(hybrid.slots(Direction::Forward).size(), 3u);
  EXPECT_EQ(hybrid.slots(Direction::Backward).size(), 2u);
  EXPECT_EQ(&hybrid.slots(Direction::Backward)[0], &hybrid[Slot::GradOutput]);
  EXPECT_EQ(slot_name(Slot::GradInput), "grad_input");
}

TEST(ScalingState, CastUsesTheScaleAndRecordsAmaxAndLosses) {
  ScalingState s(DType::E4M3, 4);
  s.set_scale(100.0f);
  const std::vector<float> x = {1.0f, -5.0f, 1e-6f, 0.0f};  // 500 saturates; 1e-4 flushes
  std::vector<uint8_t> codes(4);
  s.cast(codes.data(), x.data(), 4);
  EXPECT_EQ(s.amax_history[0], 5.0f);
  EXPECT_EQ(codes[0], fp8_encode(100.0f, DType::E4M3));
  EXPECT_EQ(codes[1], 0xfe);
  EXPECT_EQ(s.last_cast.n, 4);
  EXPECT_DOUBLE_EQ(s.last_cast.saturated_fraction(), 0.25);
  EXPECT_DOUBLE_EQ(s.last_cast.flushed_fraction(), 0.25);
}

TEST(CurrentScaling, ScaleComesFromTheTensorItself) {
  ScalingState s(DType::E5M2, 1);
  const std::vector<float> x = {0.5f, -2.0f, 1.0f};
  std::vector<uint8_t> codes(3), want(3);
  cast_current_scaling(s, CurrentScaling{.margin = 1}, codes.data(), x.data(), 3);
  EXPECT_EQ(s.scale, 14336.0f);  // 57344 / 2 / 2^1
  quantize(Isa::Scalar, want.data(), x.data(), 3, 14336.0f, DType::E5M2);
  EXPECT_EQ(codes, want);
  const std::vector<float> zeros = {0.0f, 0.0f};
  cast_current_scaling(s, CurrentScaling{}, codes.data(), zeros.data(), 2);
  EXPECT_EQ(s.scale, 1.0f);  // no amax: scale 1
}

TEST(Recipe, ValidationNamesTheField) {
  EXPECT_THROW((DelayedScaling{.amax_history_len = 0}.validate()), Error);
  EXPECT_THROW((DelayedScaling{.amax_history_len = -3}.validate()), Error);
  EXPECT_THROW((DelayedScaling{.margin = -1}.validate()), Error);
  EXPECT_NO_THROW((DelayedScaling{.amax_history_len = 1}.validate()));
  EXPECT_NO_THROW((DelayedScaling{.amax_history_len = 1024}.validate()));
  try {
    DelayedScaling{.amax_history_len = 0}.validate();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("amax_history_len 0"), std::string::npos);
  }
  EXPECT_EQ(parse_format("hybrid"), Format::Hybrid);
  EXPECT_THROW(parse_format("e5m2"), Error);  // pure E5M2 is rejected
  EXPECT_THROW(parse_format("fp8"), Error);
  EXPECT_EQ(parse_amax_compute_algo("most_recent"), AmaxComputeAlgo::MostRecent);
  EXPECT_THROW(parse_amax_compute_algo("mean"), Error);
}

// A TE user's first program: delayed scaling of one GEMM's input over a few steps, reading
// back the state a TE user reads from fp8_meta.
TEST(DelayedScaling, OfOneGemmInputAsATeUserReadsIt) {
  const fp8lm::DelayedScaling recipe{.format = fp8lm::Format::Hybrid, .amax_history_len = 16};
  recipe.validate();
  fp8lm::Fp8Meta meta(recipe);
  std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<uint8_t> q(x.size());
  for (int step = 0; step < 3; ++step) {
    meta[fp8lm::Slot::Input].cast(q.data(), x.data(), static_cast<int64_t>(x.size()));
    for (fp8lm::ScalingState& st : meta.slots(fp8lm::Direction::Forward))
      fp8lm::update_delayed_scaling(st, recipe);
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
}  // namespace fp8lm
