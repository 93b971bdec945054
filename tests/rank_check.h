#pragma once
// For the data-parallel suites: whether every rank holds the same values, and a trainer's
// weights as one vector to compare.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dist/communicator.h"
#include "train/trainer.h"

namespace fp8lm::test {

// Whether every rank holds exactly these values (bit for bit): MPI's max-reduction of each
// value and of its negation both give back this rank's own on every rank exactly then.
inline bool same_on_every_rank(Communicator& ranks, const std::vector<float>& mine) {
  std::vector<float> max = mine, neg_min(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) neg_min[i] = -mine[i];
  ranks.all_reduce_max(max, "test max");
  ranks.all_reduce_max(neg_min, "test min");
  for (size_t i = 0; i < mine.size(); ++i) {
    if (std::memcmp(&max[i], &mine[i], 4) != 0 || -neg_min[i] != mine[i]) return false;
  }
  return true;
}

// Every parameter's values, in order.
inline std::vector<float> all_weights(Trainer& t) {
  std::vector<float> out;
  for (Parameter* p : t.model().parameters()) {
    const std::vector<float> v = p->values();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// --grad-reduce bf16 against FP32 reduction, step by step on the world's ranks: the gradients
// travel in BF16 (half the bytes of a step's reductions, the few FP32 scalars aside) and each
// hop rounds the sum to BF16, so training departs from the FP32 reduction by BF16 roundings of
// the gradients, which AdamW's normalized steps turn into small changes of the weights: the
// losses stay within 1% (under 0.01% seen over 20 steps on the CPU ranks). Every rounding gives
// the same result on every rank: the weights stay identical.
inline void expect_bf16_reduction_tracks_fp32(const TrainConfig& c) {
  TrainConfig h = c;
  h.bf16_grad_reduce = true;
  Trainer fp32(c), bf16(h);
  for (int64_t step = 1; step <= c.steps; ++step) {
    const StepStats a = fp32.train_step(), b = bf16.train_step();
    EXPECT_NEAR(b.loss, a.loss, 0.01 * std::fabs(a.loss)) << "step " << step;
    EXPECT_LT(static_cast<double>(b.comm_bytes), 0.51 * static_cast<double>(a.comm_bytes));
    ASSERT_TRUE(same_on_every_rank(world(), all_weights(bf16))) << "step " << step;
  }
}

}  // namespace fp8lm::test
