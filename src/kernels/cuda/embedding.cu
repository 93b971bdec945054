// Token + position embeddings on the device. The backward pass adds each gradient row in
// position order, as kernels/cpu/embedding.cpp does, so the device and the CPU give the same
// bits: no float atomics anywhere.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/loss_embedding.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int64_t T, int64_t C, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t p = i / C, c = i % C;
    const float w = wte[int64_t{tokens[p]} * C + c];
    out[i] = wpe ? w + wpe[(p % T) * C + c] : w;
  }
}

// One thread per (t, c): dwpe[t, c] += dout[b, t, c] for b = 0, 1, ...: the CPU's order.
__global__ void position_grad_kernel(float* dwpe, const float* dout, int64_t B, int64_t T,
                                     int64_t C) {
  const int64_t TC = T * C;
  for (int64_t i = global_thread(); i < TC; i += grid_threads()) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += dout[b * TC + i];
    dwpe[i] = acc;
  }
}

__global__ void iota_kernel(int32_t* rows, int32_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) rows[i] = static_cast<int32_t>(i);
}

// Block k looks at sorted position k; if it starts a run of equal tokens, it adds that run's
// gradient rows into dwte[token] in run order. The sort is stable, so a run lists the rows
// in position order, the order the CPU adds them in. Other blocks return at once.
__global__ void token_grad_kernel(float* dwte, const float* dout, const int32_t* sorted_tokens,
                                  const int32_t* sorted_rows, int32_t n, int64_t C) {
  const auto k = static_cast<int32_t>(blockIdx.x);
  const int32_t token = sorted_tokens[k];
  if (k > 0 && sorted_tokens[k - 1] == token) return;
  int32_t end = k + 1;
  while (end < n && sorted_tokens[end] == token) ++end;
  float* dst = dwte + int64_t{token} * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dst[c];
    for (int32_t j = k; j < end; ++j) acc += dout[int64_t{sorted_rows[j]} * C + c];
    dst[c] = acc;
  }
}

unsigned grid_for(int64_t n) {
  return grid_stride_blocks(n, kThreads, 65536);
}

size_t align_up(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  const int64_t total = B * T * C;
  if (total == 0) return;
  embedding_forward_kernel<<<grid_for(total), kThreads, 0, stream>>>(out, tokens, wte, wpe, T, C,
                                                                     total);
  FP8LM_CUDA_CHECK_LAUNCH();
}

namespace {
size_t sort_bytes_for(int32_t n) {
  size_t sort_bytes = 0;
  FP8LM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, 32));
  return sort_bytes;
}
}  // namespace

size_t embedding_backward_scratch_bytes(int64_t positions) {
  if (positions > INT32_MAX) throw Error("embedding backward: more than 2^31 - 1 positions");
  const auto n = static_cast<int32_t>(positions);
  return 3 * align_up(sizeof(int32_t) * static_cast<size_t>(n)) + sort_bytes_for(n);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, void* scratch_memory,
                        cudaStream_t stream) {
  if (B * T * C == 0) return;
  if (B * T > INT32_MAX) throw Error("embedding backward: more than 2^31 - 1 positions");
  if (dwpe) {  // null: a model without a learned position table (rotary embeddings)
    position_grad_kernel<<<grid_for(T * C), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
    FP8LM_CUDA_CHECK_LAUNCH();
  }

  // Group the rows by token: a stable sort of (token, row) pairs, in the caller's scratch.
  const auto n = static_cast<int32_t>(B * T);
  size_t sort_bytes = sort_bytes_for(n);
  const size_t list_bytes = align_up(sizeof(int32_t) * static_cast<size_t>(n));
  char* scratch = static_cast<char*>(scratch_memory);
  auto* rows = reinterpret_cast<int32_t*>(scratch);
  auto* sorted_tokens = reinterpret_cast<int32_t*>(scratch + list_bytes);
  auto* sorted_rows = reinterpret_cast<int32_t*>(scratch + 2 * list_bytes);
  void* sort_temp = scratch + 3 * list_bytes;

  iota_kernel<<<grid_for(n), kThreads, 0, stream>>>(rows, n);
  FP8LM_CUDA_CHECK_LAUNCH();
  FP8LM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, tokens, sorted_tokens,
                                                   rows, sorted_rows, n, 0, 32, stream));
  token_grad_kernel<<<n, kThreads, 0, stream>>>(dwte, dout, sorted_tokens, sorted_rows, n, C);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
