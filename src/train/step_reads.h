#pragma once
// What the host needs from training steps' device work, kept in the model's backend until it
// is read in one piece (issue 34: steps need not wait for the device): per step, every
// micro-batch's per-row losses, then the gradient norm, the optimizer's decision (whether the
// step was skipped) and the FP8 cast counters the BF16 fallback watches. Several steps may be
// kept before one read: each has a slot of the same layout.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend_buffer.h"

namespace fp8lm {

class StepReads {
 public:
  // Whether a step of `rows` row losses and counter_bytes of counters can join the kept ones
  // (the same layout, and room for it among `capacity` steps); if not, read() and clear() first.
  bool fits(const Backend& be, int64_t rows, size_t counter_bytes, size_t capacity) const;
  // A new step's slot, after the kept ones (begin_step needs fits(), or no kept steps).
  void begin_step(Backend& be, int64_t rows, size_t counter_bytes, size_t capacity);
  // Where the newest step's losses of the rows from `row` on go (GPT::forward's losses).
  float* losses(int64_t row) { return slot(steps_ - 1) + row; }
  // Forgets the newest step (one that did not finish).
  void drop_newest() { --steps_; }
  // Copies the newest step's norm, decision and counters in (any may be null: not read).
  void record(const float* norm, const StepDecision* decision, const unsigned long long* counters);
  // Every kept step's values, one wait for the backend.
  void read();
  // Forgets the kept steps (read or not).
  void clear() { steps_ = 0; }

  // After read(), of kept step `step`: the mean loss of `rows` rows from `row` (mean_loss,
  // kernels/loss.h), the norm (0 if none was recorded), whether its decision skipped it, and
  // its counters (empty if none; valid until the next call).
  float mean_loss(size_t step, int64_t row, const int32_t* targets, int64_t rows) const;
  float norm(size_t step) const { return host(step)[rows_]; }
  bool skipped(size_t step) const;
  std::span<const unsigned long long> counters(size_t step) const;

 private:
  // A slot: rows_ losses, the norm, the decision (4 words), then the counters at an even float
  // offset (8-byte aligned).
  static constexpr int64_t kDecisionAt = 1, kCountersAt = 6;
  int64_t counters_at() const;  // kCountersAt past the losses, rounded up to even
  int64_t slot_floats() const;
  float* slot(int64_t step) { return buf_->data() + step * slot_floats(); }
  const float* host(size_t step) const {
    return host_.data() + static_cast<int64_t>(step) * slot_floats();
  }

  std::unique_ptr<BackendBuffer<float>> buf_;
  int64_t rows_ = 0;
  size_t counter_bytes_ = 0;
  int64_t capacity_ = 0, steps_ = 0;
  std::vector<bool> has_norm_, has_decision_, has_counters_;  // per kept step
  std::vector<float> host_;
  mutable std::vector<unsigned long long> counters_;
};

}  // namespace fp8lm
