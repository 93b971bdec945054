#pragma once
// Every Linear's FP8 scaling state on the device, as structure-of-arrays so that one kernel
// updates all slots of a direction (kernels/cuda/scaling.h). Slot numbering puts each
// direction's slots together: forward (input, weight, output) of Linear l at 3l + k, backward
// (grad_output, grad_input) at 3n + 2l + k. The host Fp8Meta objects of the model are the
// mirror that checkpoints, inspect and the metrics read.
#include <cuda_runtime_api.h>

#include <vector>

#include "fp8/scaling.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/tensor.h"
#include "kernels/cuda/scaling.h"

namespace fp8lm::gpu {

class ScalingSlots {
 public:
  // From the host metas (one per Linear, all with the same history length).
  explicit ScalingSlots(const std::vector<Fp8Meta*>& metas);

  int slot(int linear, Slot s) const;
  // An Fp8Out writing codes with slot s of Linear l: its scale, its amax (history[0]) and its
  // cast counters.
  Fp8Out out(int linear, Slot s, uint8_t* codes);
  const float* scale_inv(int linear, Slot s) const;
  Fp8Format format(int linear, Slot s) const { return format_[size_t(slot(linear, s))]; }
  // The scale_inv a forward cast used, kept for backward: the forward update changes the live
  // one between forward and backward.
  const float* forward_scale_inv(int linear, Slot s) const;
  // Records how many values the last cast through a slot had (for LastCast on the host).
  void set_cast_size(int linear, Slot s, int64_t n) { cast_n_[size_t(slot(linear, s))] = n; }

  // Zeroes the cast counters of a direction before its casts.
  void begin(Direction d, cudaStream_t s);
  // After the forward: keeps the forward scale_invs for backward, then updates the forward
  // slots. After the backward: updates the backward slots.
  void update(Direction d, const DelayedScaling& recipe, cudaStream_t s);

  void upload(const std::vector<Fp8Meta*>& metas);
  void download(const std::vector<Fp8Meta*>& metas) const;
  // Evaluation leaves the training state exactly as it was.
  void save();
  void restore();

 private:
  int n_linears_, history_;
  cuda::DeviceBuffer<float> history_buf_, scale_, scale_inv_, fp8_max_, forward_scale_inv_;
  cuda::DeviceBuffer<unsigned long long> saturated_, flushed_;
  cuda::DeviceBuffer<float> saved_history_, saved_scale_, saved_scale_inv_;
  cuda::DeviceBuffer<unsigned long long> saved_saturated_, saved_flushed_;
  std::vector<int64_t> cast_n_, saved_cast_n_;
  std::vector<Fp8Format> format_;
  cuda::ScalingSlots view();
};

}  // namespace fp8lm::gpu
