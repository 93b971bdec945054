// The device's delayed scaling against fp8/scaling.h's update_delayed_scaling, slot by slot:
// scales, scale_invs and histories bit for bit, over histories salted with the cases the
// update treats specially (zeros, NaN, Inf, amaxes whose scale overflows or underflows).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "fp8/scaling.h"
#include "kernels/cuda/scaling.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using test::same_bits;
using Vec = std::vector<float>;

std::vector<ScalingState> random_slots(int n, int H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 19), exponent(-20, 20), shift(-10, 10);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, FLT_TRUE_MIN, 1e-39f, FLT_MAX, 3e38f};
  std::vector<ScalingState> slots;
  for (int s = 0; s < n; ++s) {
    ScalingState st(s % 2 ? DType::E5M2 : DType::E4M3, H);
    // A third of the slots salted with specials (which dominate a max over a long history),
    // the rest zeros and normal values.
    const bool salted = s % 3 == 0;
    for (float& a : st.amax_history) {
      const int k = pick(rng);
      if (salted && k < 8) {
        a = specials[k];
      } else {
        a = k < 12 ? 0.0f : std::ldexp(mantissa(rng), exponent(rng));
      }
    }
    // Every few slots: [0] zero (no roll), [0] NaN, the whole history zero, or only
    // subnormal amaxes (fp8_max / amax overflows: FLT_MAX).
    if (s % 5 == 1) st.amax_history[0] = 0.0f;
    if (s % 7 == 2) st.amax_history[0] = NAN;
    if (s % 11 == 3)
      for (float& a : st.amax_history) a = 0.0f;
    if (s % 13 == 4)
      for (float& a : st.amax_history) a = pick(rng) < 10 ? FLT_TRUE_MIN : 1e-39f;
    st.set_scale(std::ldexp(mantissa(rng), shift(rng)));
    slots.push_back(st);
  }
  return slots;
}

struct DeviceSlots {
  cuda::DeviceBuffer<float> history, scale, scale_inv, fp8_max;
  cuda::ScalingSlots view;

  DeviceSlots(const std::vector<ScalingState>& slots, int H) {
    Vec h, s, si, mx;
    for (const ScalingState& st : slots) {
      h.insert(h.end(), st.amax_history.begin(), st.amax_history.end());
      s.push_back(st.scale);
      si.push_back(st.scale_inv);
      mx.push_back(fp8lm::fp8_max(st.format));
    }
    history = cuda::to_device(h);
    scale = cuda::to_device(s);
    scale_inv = cuda::to_device(si);
    fp8_max = cuda::to_device(mx);
    view.amax_history = history.data();
    view.scale = scale.data();
    view.scale_inv = scale_inv.data();
    view.fp8_max = fp8_max.data();
    view.n = static_cast<int>(slots.size());
    view.history_len = H;
  }
};

TEST(CudaScaling, DelayedScalingMatchesCpuBits) {
  FP8LM_REQUIRE_CUDA();
  const int n = 300;
  for (int H : {1, 2, 16, 1024}) {
    for (AmaxComputeAlgo algo : {AmaxComputeAlgo::Max, AmaxComputeAlgo::MostRecent}) {
      // Margin 140 pushes most scales below FLT_MIN (clamped there).
      for (int margin : {0, 2, 140}) {
        SCOPED_TRACE(testing::Message() << "H " << H << " algo " << amax_compute_algo_name(algo)
                                        << " margin " << margin);
        std::vector<ScalingState> slots = random_slots(n, H, static_cast<uint32_t>(H + margin));
        DeviceSlots dev(slots, H);
        // A sub-range: the slots outside it must stay as they are on both sides.
        const int first = 7, count = n - 20;
        cuda::update_delayed_scaling(dev.view, first, count, margin, algo, nullptr);
        DelayedScaling recipe;
        recipe.margin = margin;
        recipe.amax_compute_algo = algo;
        recipe.amax_history_len = H;
        for (int s = first; s < first + count; ++s) update_delayed_scaling(slots[s], recipe);

        Vec h, sc, si;
        for (const ScalingState& st : slots) {
          h.insert(h.end(), st.amax_history.begin(), st.amax_history.end());
          sc.push_back(st.scale);
          si.push_back(st.scale_inv);
        }
        // The same comparisons and correctly rounded divisions; the history is only moved.
        EXPECT_TRUE(same_bits(cuda::to_host(dev.history.data(), h.size()), h));
        EXPECT_TRUE(same_bits(cuda::to_host(dev.scale.data(), sc.size()), sc));
        EXPECT_TRUE(same_bits(cuda::to_host(dev.scale_inv.data(), si.size()), si));
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
