#pragma once
// A GEMM output that backward needs again (attention's packed q, k, v; the MLP's
// pre-activation). Under FP32 GEMMs it is kept in FP32. Under BF16 or FP8 GEMMs in training it
// is kept in BF16, as torch.autocast and TE keep GEMM outputs in the activation dtype: forward
// computes in FP32 in a shared scratch buffer, save() rounds it into the BF16 copy, and backward
// widens that copy back into the same scratch role. Inference (no backward to come) keeps FP32,
// so the KV cache and logits are what full-precision outputs give.
#include <cstdint>

#include "core/bf16.h"
#include "core/scoped_value.h"
#include "kernels/backend_buffer.h"
#include "nn/scratch.h"

namespace fp8lm {

class SavedActivation {
 public:
  SavedActivation(Scratch role, Backend& backend) : be_(backend), role_(role) {}
  // Where forward writes the FP32 values (n of them); they stay valid until save().
  float* begin(int64_t n, bool bf16);
  // Rounds the FP32 values into the BF16 copy (nothing to do when kept in FP32).
  void save();
  // The forward values as FP32 during forward (before save) or for backward (after).
  const float* values();
  // The FP32 values forward may still update in place (the bias the activation adds).
  float* mutable_values() const { return work_; }
  // The BF16 copy itself, for a backward kernel that widens it as it reads (null where the
  // values are FP32: kept so, not saved yet, or already widened), and the FP32 room, the
  // role's scratch, where a backend without such a kernel widens it.
  const bf16_t* bf16_copy() const { return bf16_ && saved_ ? b16_.data() : nullptr; }
  float* widening_room() const;
  size_t bytes() const { return f32_.bytes() + b16_.bytes(); }

 private:
  Backend& be_;
  Scratch role_;
  bool bf16_ = false, saved_ = false;
  int64_t n_ = 0;
  float* work_ = nullptr;
  BackendBuffer<float> f32_{be_};
  BackendBuffer<bf16_t> b16_{be_};
};

// Whether the current forward will be followed by backward (GPT::forward with targets).
using TrainingSetting = ThreadSetting<bool, false, struct TrainingTag>;
inline bool training_forward() {
  return TrainingSetting::value();
}
using TrainingForward = TrainingSetting::Scope;

}  // namespace fp8lm
