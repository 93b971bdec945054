#include "train/step_reads.h"

#include <cstddef>
#include <cstring>

#include "fp8lm/error.h"
#include "kernels/loss.h"

namespace fp8lm {

int64_t StepReads::counters_at() const {
  return (rows_ + kCountersAt + 1) / 2 * 2;
}

int64_t StepReads::slot_floats() const {
  return counters_at() + static_cast<int64_t>((counter_bytes_ + 7) / 8) * 2;
}

bool StepReads::fits(const Backend& be, int64_t rows, size_t counter_bytes, size_t capacity) const {
  return buf_ && &buf_->backend() == &be && rows == rows_ && counter_bytes == counter_bytes_ &&
         static_cast<int64_t>(capacity) <= capacity_ && steps_ < static_cast<int64_t>(capacity);
}

void StepReads::begin_step(Backend& be, int64_t rows, size_t counter_bytes, size_t capacity) {
  if (!fits(be, rows, counter_bytes, capacity)) {
    if (steps_ > 0) throw Error("internal: a training step's reads joined kept ones unlike it");
    if (!buf_ || &buf_->backend() != &be) buf_ = std::make_unique<BackendBuffer<float>>(be);
    rows_ = rows;
    counter_bytes_ = counter_bytes;
    capacity_ = static_cast<int64_t>(capacity);
    buf_->resize(static_cast<size_t>(capacity_ * slot_floats()));
    host_.resize(buf_->size());  // grows with the buffer: no allocation per step
    has_norm_.assign(capacity, false);
    has_decision_.assign(capacity, false);
    has_counters_.assign(capacity, false);
  }
  ++steps_;
}

void StepReads::record(const float* norm, const StepDecision* decision,
                       const unsigned long long* counters) {
  Backend& be = buf_->backend();
  float* at = slot(steps_ - 1) + rows_;
  const auto k = static_cast<size_t>(steps_ - 1);
  has_norm_[k] = norm != nullptr;
  has_decision_[k] = decision != nullptr;
  has_counters_[k] = counters != nullptr && counter_bytes_ > 0;
  if (norm) be.copy(at, norm, sizeof(float));
  if (decision) be.copy(at + kDecisionAt, decision, sizeof(StepDecision));
  if (has_counters_[k]) be.copy(slot(steps_ - 1) + counters_at(), counters, counter_bytes_);
}

void StepReads::read() {
  if (steps_ == 0) return;
  buf_->backend().download(host_.data(), buf_->data(),
                           static_cast<size_t>(steps_ * slot_floats()) * sizeof(float));
  for (int64_t k = 0; k < steps_; ++k)
    if (!has_norm_[static_cast<size_t>(k)])
      host_[static_cast<size_t>(k * slot_floats() + rows_)] = 0;
}

float StepReads::mean_loss(size_t step, int64_t row, const int32_t* targets, int64_t rows) const {
  return fp8lm::mean_loss(host(step) + row, targets, rows);
}

bool StepReads::skipped(size_t step) const {
  if (!has_decision_[step]) return false;
  int32_t skip = 0;
  std::memcpy(&skip,
              reinterpret_cast<const char*>(host(step) + rows_ + kDecisionAt) +
                  offsetof(StepDecision, skip),
              sizeof skip);
  return skip != 0;
}

std::span<const unsigned long long> StepReads::counters(size_t step) const {
  if (!has_counters_[step]) return {};
  counters_.resize(counter_bytes_ / sizeof(unsigned long long));  // once: the layout's size
  std::memcpy(counters_.data(), host(step) + counters_at(), counter_bytes_);
  return counters_;
}

}  // namespace fp8lm
