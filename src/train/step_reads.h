#pragma once
// What the host needs from a training step's device work, kept in the model's backend until
// it is read in one piece (issue 34: a step waits for the device once): every micro-batch's
// per-row losses, then the gradient norm, then the FP8 cast counters the BF16 fallback watches.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend_buffer.h"

namespace fp8lm {

class StepReads {
 public:
  // Room for `rows` row losses and, after them, a norm and counter_bytes of counters, on be.
  void begin(Backend& be, int64_t rows, size_t counter_bytes);
  // Where the losses of the rows from `row` on go (GPT::forward's losses).
  float* losses(int64_t row) { return buf_->data() + row; }
  // Copies the norm and the counters in (either may be null: not read) and reads everything.
  void read(const float* norm, const unsigned long long* counters);
  // After read(): the mean loss of `rows` rows from `row` (mean_loss, kernels/loss.h).
  float mean_loss(int64_t row, const int32_t* targets, int64_t rows) const;
  float norm() const { return host_[static_cast<size_t>(rows_)]; }
  const std::vector<unsigned long long>& counters() const { return counters_; }

 private:
  std::unique_ptr<BackendBuffer<float>> buf_;
  int64_t rows_ = 0;
  size_t counter_bytes_ = 0;
  std::vector<float> host_;
  std::vector<unsigned long long> counters_;
};

}  // namespace fp8lm
