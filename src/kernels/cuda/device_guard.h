#pragma once
// Makes a device current for one call and puts the caller's back afterwards, as TE's and
// PyTorch's device guards do. The CUDA runtime keeps one current device per host thread and
// every allocation, copy, launch and cuBLASLt call acts on it, so a process holding backends
// on two devices (or a user's code that switched devices between our calls) would otherwise
// run one backend's work on the other's device.
#include <cuda_runtime_api.h>

#include <new>

#include "kernels/cuda/cuda_check.h"

namespace fp8lm::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    FP8LM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) FP8LM_CUDA_CHECK(cudaSetDevice(device_));
  }
  // For paths that must not throw (freeing memory from destructors): errors are ignored, as
  // cudaFree's own are there.
  DeviceGuard(int device, std::nothrow_t) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device_;
    if (previous_ != device_) cudaSetDevice(device_);
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);  // no throwing from a destructor
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace fp8lm::cuda
