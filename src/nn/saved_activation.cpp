#include "nn/saved_activation.h"

namespace fp8lm {

float* SavedActivation::begin(int64_t n, bool bf16) {
  n_ = n;
  bf16_ = bf16;
  saved_ = false;
  if (bf16_) {
    work_ = scratch<float>(be_, role_, n);
  } else {
    f32_.resize(static_cast<size_t>(n));
    work_ = f32_.data();
  }
  return work_;
}

void SavedActivation::save() {
  saved_ = true;
  if (!bf16_) return;
  b16_.resize(static_cast<size_t>(n_));
  be_.fp32_to_bf16(b16_.data(), work_, n_);
}

float* SavedActivation::widening_room() const {
  return scratch<float>(be_, role_, n_);
}

const float* SavedActivation::values() {
  if (bf16_ && saved_) {
    // Widened once per backward into the role's scratch: exact, BF16 -> FP32.
    work_ = widening_room();
    be_.bf16_to_fp32(work_, b16_.data(), n_);
    saved_ = false;  // work_ now holds the values until the role is reused
  }
  return work_;
}

}  // namespace fp8lm
