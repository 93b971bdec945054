// The cross-entropy oracle: plain loops in double, no threads, no intrinsics.
#include <cmath>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/loss.h"

namespace fp8lm::cpu::ref {

float softmax_cross_entropy(float* dlogits, float* losses, const float* logits,
                            const int32_t* targets, int64_t rows, int64_t V, float grad_scale) {
  check_targets(targets, rows, V);
  double total = 0.0;
  int64_t counted = 0;
  std::vector<double> x(static_cast<size_t>(V));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < V; ++i) x[i] = logits[r * V + i];  // a copy: dlogits may alias
    const int32_t t = targets[r];
    if (t < 0) {
      if (losses != nullptr) losses[r] = 0.0f;
      if (dlogits != nullptr)
        for (int64_t i = 0; i < V; ++i) dlogits[r * V + i] = 0.0f;
      continue;
    }
    double m = -INFINITY;
    for (int64_t i = 0; i < V; ++i) m = std::fmax(m, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(x[i] - m);
    const double loss = std::log(sum) - (x[t] - m);
    if (losses != nullptr) losses[r] = static_cast<float>(loss);
    total += loss;
    ++counted;
    if (dlogits != nullptr) {
      for (int64_t i = 0; i < V; ++i) {
        const double p = std::exp(x[i] - m) / sum;
        dlogits[r * V + i] = static_cast<float>((p - (i == t ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  return counted == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(counted));
}

}  // namespace fp8lm::cpu::ref
