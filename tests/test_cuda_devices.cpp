// Backends on two devices in one process (issue 34, finding 10): each backend's work runs on
// its own device whatever device the caller left current, and the caller's current device is
// left as it was. Under the emulator (CUDA_EMU_DEVICES=2) a launch, copy target or cuBLASLt
// operand on a device other than the current one is refused, so a missing device guard fails
// here; on a machine with one GPU the test skips.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/backend.h"
#include "kernels/cuda/device_query.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;

int current_device() {
  int d = -1;
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  return d;
}

// C = A · B (2x3 by 3x2) and C + C on backend b, with device `other` current around each call.
Vec product_twice(Backend& b, int other) {
  const Vec a = {1, 2, 3, 4, 5, 6}, bm = {1, -1, 2, 0.5f, -3, 4};
  auto* da = static_cast<float*>(b.allocate(6 * sizeof(float)));
  auto* db = static_cast<float*>(b.allocate(6 * sizeof(float)));
  auto* dc = static_cast<float*>(b.allocate(4 * sizeof(float)));
  EXPECT_EQ(current_device(), other);
  b.upload(da, a.data(), 6 * sizeof(float));
  b.upload(db, bm.data(), 6 * sizeof(float));
  b.zero(dc, 4 * sizeof(float));
  b.gemm(Trans::N, Trans::N, 2, 2, 3, 1.0f, {da, DType::F32}, {db, DType::F32}, 0.0f, dc);
  b.add(dc, dc, dc, 4);
  Vec c(4);
  b.download(c.data(), dc, 4 * sizeof(float));
  for (float* p : {da, db, dc}) b.release(p);
  EXPECT_EQ(current_device(), other);
  return c;
}

TEST(CudaDevices, EachBackendWorksOnItsOwnDevice) {
  FP8LM_REQUIRE_CUDA();
#ifdef FP8LM_CUDA_EMU
  setenv("CUDA_EMU_DEVICES", "2", 1);
#endif
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "needs two CUDA devices";
  // [1 2 3; 4 5 6] · [1 -1; 2 0.5; -3 4] = [-4 12; -4 22.5], doubled.
  const Vec want = {-8, 24, -8, 45};
  for (const int current : {0, 1}) {
    SCOPED_TRACE(current);
    ASSERT_EQ(cudaSetDevice(current), cudaSuccess);
    for (const int device : {0, 1}) {
      SCOPED_TRACE(device);
      EXPECT_EQ(product_twice(cuda::backend(device), current), want);
    }
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
}  // namespace fp8lm
