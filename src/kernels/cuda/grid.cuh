#pragma once
// Launch arithmetic the kernels share: block counts and the grid-stride loop.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace fp8lm::cuda {

// n / d rounded up, for n >= 0 and d > 0.
constexpr int64_t ceil_div(int64_t n, int64_t d) {
  return (n + d - 1) / d;
}

// Blocks of `threads` for a grid-stride loop over n items: one item a thread, but at least one
// block and at most max_blocks (the loop covers the rest; more blocks would only add atomics
// and scheduling).
inline unsigned grid_stride_blocks(int64_t n, int threads, int64_t max_blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, threads), 1, max_blocks));
}

#ifdef __CUDACC__

// A grid-stride loop over a 1-D grid: for (i = global_thread(); i < n; i += grid_threads()).
__device__ inline int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

#endif  // __CUDACC__

}  // namespace fp8lm::cuda
