#include "kernels/loss.h"

#include <string>

#include "fp8lm/error.h"

namespace fp8lm {

void check_targets(const int32_t* targets, int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] >= V)
      throw Error("cross-entropy: target " + std::to_string(targets[r]) + " at row " +
                  std::to_string(r) + " is outside the vocabulary of " + std::to_string(V));
  }
}

float mean_loss(const float* losses, const int32_t* targets, int64_t rows) {
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0) continue;
    total += losses[r];
    ++counted;
  }
  return counted == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(counted));
}

}  // namespace fp8lm
