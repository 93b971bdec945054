#pragma once
// For the data-parallel suites: whether every rank holds the same values, and a trainer's
// weights as one vector to compare.
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

}  // namespace fp8lm::test
