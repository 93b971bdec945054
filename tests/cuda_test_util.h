#pragma once
// For the CUDA parity tests: skip (reported as skipped, never passed) when this process sees
// no CUDA device, and move vectors to and from the device.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_query.h"

namespace fp8lm::test {

inline bool cuda_device_present() {
  static const bool present = !cuda::query_devices().devices.empty();
  return present;
}

inline int cuda_cc() {  // compute capability of device 0 as 10*major + minor (0: none)
  static const int cc = [] {
    const auto q = cuda::query_devices();
    return q.devices.empty() ? 0 : q.devices[0].cc_major * 10 + q.devices[0].cc_minor;
  }();
  return cc;
}

}  // namespace fp8lm::test

// Synchronous copies of whole vectors to and from the device (sizes in elements).
namespace fp8lm::cuda {
template <typename T>
void upload(T* dst, const T* src, size_t n) {
  FP8LM_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
void download(T* dst, const T* src, size_t n) {
  FP8LM_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost));
}
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
  DeviceBuffer<T> d(v.size());
  upload(d.data(), v.data(), v.size());
  return d;
}
template <typename T>
std::vector<T> to_host(const T* src, size_t n) {
  std::vector<T> v(n);
  download(v.data(), src, n);
  return v;
}

}  // namespace fp8lm::cuda

// The names every CUDA parity test uses, declared once.
namespace fp8lm {
using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
}  // namespace fp8lm

#define FP8LM_REQUIRE_CUDA()                                                     \
  do {                                                                           \
    if (!::fp8lm::test::cuda_device_present()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// FP8 tensor-core GEMMs need compute capability 8.9 (Ada) or 9.0 (Hopper).
#define FP8LM_REQUIRE_CUDA_FP8()                                                   \
  do {                                                                             \
    FP8LM_REQUIRE_CUDA();                                                          \
    if (::fp8lm::test::cuda_cc() < 89) GTEST_SKIP() << "FP8 GEMMs need cc >= 8.9"; \
  } while (0)
