#pragma once
// The CUDA backend's entry points, timed by kind while profiling is on (kernels/op_times.h):
// events recorded before and after the work each queues, on the backend's stream, where its
// work runs in order, so the kinds' times add up to the device's busy time.
#include <cuda_runtime_api.h>

#include "kernels/cuda/device_guard.h"
#include "kernels/op_times.h"

namespace fp8lm::cuda {

// One CUDA backend entry point: its device made current (DeviceGuard) and, while profiling,
// its work between two events (an entry point another one calls is part of the caller's).
class OpScope {
 public:
  OpScope(int device, OpKind kind, cudaStream_t stream);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  DeviceGuard guard_;
  OpKind kind_;
  int device_;
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;  // null: not profiling
};

}  // namespace fp8lm::cuda
