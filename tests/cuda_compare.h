#pragma once
// Comparisons for the CUDA parity tests: outputs that must equal their CPU twin's bits (NaN
// counts as equal to any NaN: the GPU's arithmetic makes its own canonical NaN where the CPU
// propagates an input's sign and payload), and an FP8 output on the device with its
// statistics.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "cuda_test_util.h"
#include "fp8/quantize.h"
#include "kernels/tensor.h"

namespace fp8lm::test {

inline bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

inline bool is_nan_code(uint8_t code, DType f) {
  return std::isnan(fp8_decode(code, f));
}

inline bool is_nan_bf16(bf16_t h) {
  return (h & 0x7fffu) > 0x7f80u;
}

// Every element equal (NaN to NaN); on failure, how many differ and the first.
template <typename T, typename Same, typename Show>
void expect_all_same(const std::vector<T>& got, const std::vector<T>& want, Same same, Show show,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!same(got[i], want[i]) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " differ, first at " << first
                     << ": got " << show(got[first]) << ", want " << show(want[first]);
}

inline void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want,
                               const char* what) {
  expect_all_same(
      got, want, same_float, [](float v) { return v; }, what);
}

inline void expect_same_codes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                              DType f, const char* what) {
  expect_all_same(
      got, want,
      [f](uint8_t a, uint8_t b) { return a == b || (is_nan_code(a, f) && is_nan_code(b, f)); },
      [](uint8_t c) { return static_cast<int>(c); }, what);
}

inline void expect_same_bf16(const std::vector<bf16_t>& got, const std::vector<bf16_t>& want,
                             const char* what) {
  expect_all_same(
      got, want, [](bf16_t a, bf16_t b) { return a == b || (is_nan_bf16(a) && is_nan_bf16(b)); },
      [](bf16_t h) { return static_cast<int>(h); }, what);
}

// An FP8 output on the device: codes, scale, amax and counters, the counters and amax
// starting from given values so that a test sees them accumulate.
struct DeviceFp8 {
  cuda::DeviceBuffer<uint8_t> codes;
  cuda::DeviceBuffer<float> scale, amax;
  cuda::DeviceBuffer<unsigned long long> saturated, flushed;
  DType format;

  DeviceFp8(size_t n, float scale_value, DType f, float amax0 = 0.0f,
            unsigned long long counts0 = 0)
      : codes(n), scale(1), amax(1), saturated(1), flushed(1), format(f) {
    cuda::upload(scale.data(), &scale_value, 1);
    cuda::upload(amax.data(), &amax0, 1);
    cuda::upload(saturated.data(), &counts0, 1);
    cuda::upload(flushed.data(), &counts0, 1);
  }
  Fp8Out out() {
    return {codes.data(), scale.data(), amax.data(), format, saturated.data(), flushed.data()};
  }
  std::vector<uint8_t> host_codes(size_t n) const { return cuda::to_host(codes.data(), n); }
  // The statistics as CastStats, less the starting counts.
  CastStats stats(unsigned long long counts0 = 0) const {
    const float a = cuda::to_host(amax.data(), 1)[0];
    const auto s = cuda::to_host(saturated.data(), 1)[0];
    const auto f = cuda::to_host(flushed.data(), 1)[0];
    return {a, static_cast<int64_t>(s - counts0), static_cast<int64_t>(f - counts0)};
  }
};

}  // namespace fp8lm::test
