#include "train/step_reads.h"

#include <cstring>

#include "kernels/loss.h"

namespace fp8lm {

void StepReads::begin(Backend& be, int64_t rows, size_t counter_bytes) {
  if (!buf_ || &buf_->backend() != &be) buf_ = std::make_unique<BackendBuffer<float>>(be);
  rows_ = rows;
  counter_bytes_ = counter_bytes;
  buf_->resize(static_cast<size_t>(rows + 1) + (counter_bytes + sizeof(float) - 1) / sizeof(float));
}

void StepReads::read(const float* norm, const unsigned long long* counters) {
  Backend& be = buf_->backend();
  float* counters_at = buf_->data() + rows_ + 1;
  if (norm) be.copy(buf_->data() + rows_, norm, sizeof(float));
  if (counters && counter_bytes_) be.copy(counters_at, counters, counter_bytes_);
  host_.resize(buf_->size());  // grows once: no allocation per step
  be.download(host_.data(), buf_->data(), host_.size() * sizeof(float));
  if (!norm) host_[static_cast<size_t>(rows_)] = 0.0f;
  counters_.assign(counters ? counter_bytes_ / sizeof(unsigned long long) : 0, 0);
  if (!counters_.empty())
    std::memcpy(counters_.data(), host_.data() + rows_ + 1,
                counters_.size() * sizeof(counters_[0]));
}

float StepReads::mean_loss(int64_t row, const int32_t* targets, int64_t rows) const {
  return fp8lm::mean_loss(host_.data() + row, targets, rows);
}

}  // namespace fp8lm
