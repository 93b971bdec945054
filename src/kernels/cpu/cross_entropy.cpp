#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/row_reduce.h"

#include <cmath>
#include <vector>

#include "core/grown.h"
#include "fp8lm/error.h"
#include "kernels/loss.h"
#include "kernels/loss_ops.h"

namespace fp8lm::cpu {
namespace {

// The row's max (loss::max_ignoring_nan), in kLanes partial maxima the compiler vectorizes.
inline float row_max(const float* x, int64_t n) {
  float part[kLanes];
  for (float& p : part) p = -INFINITY;
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) part[j] = loss::max_ignoring_nan(part[j], x[i + j]);
  for (int64_t i = body; i < n; ++i) part[i - body] = loss::max_ignoring_nan(part[i - body], x[i]);
  float m = -INFINITY;
  for (float p : part) m = loss::max_ignoring_nan(m, p);
  return m;
}

}  // namespace

float softmax_cross_entropy_unfused(float* dlogits, float* probs, const float* logits,
                                    const int32_t* targets, int64_t rows, int64_t V,
                                    float grad_scale) {
  check_targets(targets, rows, V);
  const bool parallel = rows * V >= kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * V;
    float* p = probs + r * V;
    const float m = row_max(x, V);
    for (int64_t i = 0; i < V; ++i) p[i] = std::exp(x[i] - m);
    const float inv = 1.0f / lane_sum(V, [p](int64_t i) { return p[i]; });
    for (int64_t i = 0; i < V; ++i) p[i] *= inv;
  }
  std::vector<float> losses(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    losses[r] = targets[r] < 0 ? 0.0f : -std::log(probs[r * V + targets[r]]);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dlogits + r * V;
    const float* p = probs + r * V;
    const int32_t t = targets[r];
    for (int64_t i = 0; i < V; ++i) d[i] = t < 0 ? 0.0f : p[i] * grad_scale;
    if (t >= 0) d[t] -= grad_scale;
  }
  return mean_loss(losses.data(), targets, rows);
}

float softmax_cross_entropy(float* dlogits, float* losses, const float* logits,
                            const int32_t* targets, int64_t rows, int64_t V, float grad_scale) {
  // Checked up front: an exception must not leave a parallel region.
  check_targets(targets, rows, V);
  thread_local std::vector<float> own;  // grows once: no allocation in a steady state
  if (losses == nullptr) losses = grown(own, static_cast<size_t>(rows));

#pragma omp parallel for schedule(static) if (rows * V >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * V;
    float* d = dlogits == nullptr ? nullptr : dlogits + r * V;
    const int32_t t = targets[r];
    if (t < 0) {
      losses[r] = 0.0f;
      if (d != nullptr)
        for (int64_t i = 0; i < V; ++i) d[i] = 0.0f;
      continue;
    }
    const float m = row_max(x, V);
    const float x_target = x[t];  // read before d (possibly x itself) is written
    float sum;
    if (d != nullptr) {
      // Keep the exponentials in d: one exp per logit, and the same sum as the branch below.
      for (int64_t i = 0; i < V; ++i) d[i] = std::exp(x[i] - m);
      sum = lane_sum(V, [d](int64_t i) { return d[i]; });
      const float k = loss::gradient_factor(grad_scale, sum);
      for (int64_t i = 0; i < V; ++i) d[i] = loss::gradient(d[i], k);
      d[t] = loss::gradient_at_target(d[t], grad_scale);
    } else {
      sum = lane_sum(V, [x, m](int64_t i) { return std::exp(x[i] - m); });
    }
    losses[r] = loss::row_loss(std::log(sum), x_target, m);
  }

  return mean_loss(losses, targets, rows);
}

}  // namespace fp8lm::cpu
