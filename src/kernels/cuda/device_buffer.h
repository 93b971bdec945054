#pragma once
// An owned device allocation. Sizes are in elements.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/step_graph.h"

namespace fp8lm::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceBuffer() { free_device(p_); }
  // Grows (contents lost) when n exceeds the capacity; never shrinks.
  void resize(size_t n) {
    if (n <= n_) return;
    free_device(p_);  // after a step's graph runs, if the step is being captured
    p_ = nullptr;
    n_ = 0;
    FP8LM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
    n_ = n;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void zero(cudaStream_t s = nullptr) {
    if (n_) FP8LM_CUDA_CHECK(cudaMemsetAsync(p_, 0, bytes(), s));
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace fp8lm::cuda
