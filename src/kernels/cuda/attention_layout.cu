#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/attention_layout.h"
#include "kernels/cuda/cuda_check.h"

namespace fp8lm::cuda::attention_detail {
namespace {

constexpr int kThreads = 256;

// Grid-stride loops cover any size; more blocks than this only queue.
unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 1 << 16));
}

// One thread per destination element, so the padding is written too.
__global__ void split_heads_kernel(__nv_bfloat16* dst, const float* src, int64_t src_stride,
                                   int64_t src_offset, int64_t T, int64_t H, int64_t hd,
                                   int64_t t_pad, int64_t hd_pad, int64_t group, int64_t total) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = idx % hd_pad;
    const int64_t t = idx / hd_pad % t_pad;
    const int64_t bh = idx / (hd_pad * t_pad);
    const int64_t b = bh / H;
    const int64_t h = bh % H;
    float x = 0.0f;
    if (t < T && d < hd) x = src[(b * T + t) * src_stride + src_offset + h / group * hd + d];
    dst[idx] = __float2bfloat16_rn(x);
  }
}

// One thread per destination element (token-major), so consecutive threads write consecutive
// floats of a token row.
__global__ void merge_heads_kernel(float* dst, int64_t dst_stride, int64_t dst_offset,
                                   const float* src, int64_t T, int64_t H, int64_t hd,
                                   int64_t t_pad, int64_t hd_pad, int64_t group, int64_t total) {
  const int64_t groups = H / group;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = idx % hd;
    const int64_t g = idx / hd % groups;
    const int64_t bt = idx / (hd * groups);  // b*T + t
    const int64_t b = bt / T;
    const int64_t t = bt % T;
    float sum = 0.0f;
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      sum += src[((b * H + h) * t_pad + t) * hd_pad + d];
    dst[bt * dst_stride + dst_offset + g * hd + d] = sum;
  }
}

__device__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per head-major row; a warp's lanes stride along d.
__global__ void row_dots_kernel(float* D, const float* dout, const float* out, int64_t T, int64_t H,
                                int64_t hd, int64_t t_pad, int64_t rows) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps_per_grid = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; row < rows;
       row += warps_per_grid) {
    const int64_t t = row % t_pad;
    const int64_t bh = row / t_pad;
    float sum = 0.0f;
    if (t < T) {
      const int64_t at = (bh / H * T + t) * (H * hd) + bh % H * hd;
      for (int64_t d = lane; d < hd; d += 32) sum += dout[at + d] * out[at + d];
    }
    sum = warp_sum(sum);
    if (lane == 0) D[row] = sum;
  }
}

}  // namespace

void split_heads(bf16_t* dst, const float* src, int64_t src_stride, int64_t src_offset, int64_t B,
                 int64_t T, int64_t H, int64_t hd, int64_t t_pad, int64_t hd_pad,
                 cudaStream_t stream, int64_t group) {
  const int64_t total = B * H * t_pad * hd_pad;
  if (total == 0) return;
  split_heads_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      reinterpret_cast<__nv_bfloat16*>(dst), src, src_stride, src_offset, T, H, hd, t_pad, hd_pad,
      group, total);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void merge_heads(float* dst, int64_t dst_stride, int64_t dst_offset, const float* src, int64_t B,
                 int64_t T, int64_t H, int64_t hd, int64_t t_pad, int64_t hd_pad,
                 cudaStream_t stream, int64_t group) {
  const int64_t total = B * T * (H / group) * hd;
  if (total == 0) return;
  merge_heads_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      dst, dst_stride, dst_offset, src, T, H, hd, t_pad, hd_pad, group, total);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void split_qkv(bf16_t* const parts[3], const float* qkv, const QkvLayout& lay, int64_t B, int64_t T,
               int64_t H, int64_t t_pad, int64_t hd_pad, cudaStream_t stream) {
  split_heads(parts[0], qkv, lay.row, lay.q(0), B, T, H, lay.hd, t_pad, hd_pad, stream);
  split_heads(parts[1], qkv, lay.row, lay.k(0), B, T, H, lay.hd, t_pad, hd_pad, stream, lay.group);
  split_heads(parts[2], qkv, lay.row, lay.v(0), B, T, H, lay.hd, t_pad, hd_pad, stream, lay.group);
}

void merge_qkv(float* dqkv, const float* const grads[3], const QkvLayout& lay, int64_t B, int64_t T,
               int64_t H, int64_t t_pad, int64_t hd_pad, cudaStream_t stream) {
  merge_heads(dqkv, lay.row, lay.q(0), grads[0], B, T, H, lay.hd, t_pad, hd_pad, stream);
  merge_heads(dqkv, lay.row, lay.k(0), grads[1], B, T, H, lay.hd, t_pad, hd_pad, stream, lay.group);
  merge_heads(dqkv, lay.row, lay.v(0), grads[2], B, T, H, lay.hd, t_pad, hd_pad, stream, lay.group);
}

void row_dots(float* D, const float* dout, const float* out, int64_t B, int64_t T, int64_t H,
              int64_t hd, int64_t t_pad, cudaStream_t stream) {
  const int64_t rows = B * H * t_pad;
  if (rows == 0) return;
  row_dots_kernel<<<blocks_for(rows * 32), kThreads, 0, stream>>>(D, dout, out, T, H, hd, t_pad,
                                                                  rows);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void* Workspace::get(size_t bytes) {
  int device = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex_);
  if (per_device_.size() <= static_cast<size_t>(device)) per_device_.resize(device + 1);
  DeviceBuffer<uint8_t>& buffer = per_device_[device];
  // Growing frees the old buffer; cudaFree waits for the device, so work still queued on it
  // from an earlier call finishes first.
  buffer.resize(std::max<size_t>(bytes, 1));
  return buffer.data();
}

}  // namespace fp8lm::cuda::attention_detail
