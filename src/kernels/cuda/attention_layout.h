#pragma once
// What the two attention paths (attention_plain.cu, attention_flash.cu) share: moving heads
// between the model's token-major layout and a head-major BF16 one, D = rowsum(dout * out) for
// the backward pass, and device scratch.
//
// Head-major layout: [B, H, t_pad, hd_pad], element (b, h, t, d) at ((b*H + h)*t_pad + t)*hd_pad
// + d. Rows t >= T and columns d >= hd are padding: written as zeros by split_heads, never read
// back by merge_heads. The plain path pads hd to a multiple of 8 (16-byte GEMM rows); the flash
// path pads T to its 64-row tiles so that its tile loads need no bounds checks.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/types.h"

namespace fp8lm::cuda::attention_detail {

// dst (head-major BF16, H heads) <- columns [offset + (h/group)*hd, ..+hd) of each token row
// of src, whose rows are src_stride floats apart: qkv's q, k or v part, or dout (stride C,
// offset 0). group > 1 repeats a key/value head for each of its query heads (Llama's repeat_kv).
void split_heads(bf16_t* dst, const float* src, int64_t src_stride, int64_t src_offset, int64_t B,
                 int64_t T, int64_t H, int64_t hd, int64_t t_pad, int64_t hd_pad,
                 cudaStream_t stream, int64_t group = 1);

// The inverse for FP32 results: columns [offset + g*hd, ..+hd) of dst's token rows <- the sum,
// in head order, of src's (head-major FP32, H heads) heads g*group .. (g+1)*group - 1.
void merge_heads(float* dst, int64_t dst_stride, int64_t dst_offset, const float* src, int64_t B,
                 int64_t T, int64_t H, int64_t hd, int64_t t_pad, int64_t hd_pad,
                 cudaStream_t stream, int64_t group = 1);

// parts[0..2] <- q, k and v of packed qkv rows (lay), each H heads head-major.
void split_qkv(bf16_t* const parts[3], const float* qkv, const QkvLayout& lay, int64_t B, int64_t T,
               int64_t H, int64_t t_pad, int64_t hd_pad, cudaStream_t stream);
// dqkv <- grads[0..2] (dq, dk, dv per query head): a key/value head's the sum of its group's.
void merge_qkv(float* dqkv, const float* const grads[3], const QkvLayout& lay, int64_t B, int64_t T,
               int64_t H, int64_t t_pad, int64_t hd_pad, cudaStream_t stream);

// D[(b*H + h)*t_pad + t] = sum_d dout[b, t, h*hd + d] * out[b, t, h*hd + d] in FP32 (both
// [B, T, C]); 0 for the padding rows t >= T. This is sum_j P_tj dP_tj, the softmax Jacobian's
// per-row term, without the T x T matrices.
void row_dots(float* D, const float* dout, const float* out, int64_t B, int64_t T, int64_t H,
              int64_t hd, int64_t t_pad, cudaStream_t stream);

// Device scratch owned by one caller (a static in each .cu), one buffer per device, grown to
// the largest request and reused. Calls that share one must not overlap in time on a device:
// the buffer is handed out whole, as the rest of the backend's scratch is.
class Workspace {
 public:
  void* get(size_t bytes);

 private:
  std::mutex mutex_;
  std::vector<DeviceBuffer<uint8_t>> per_device_;
};

// Carves one workspace into pieces that start on 256-byte boundaries (what cuBLASLt and the
// vector loads want): add() every piece to get its offset, then get(size()) once.
class Carve {
 public:
  template <typename T>
  size_t add(int64_t n) {
    const size_t at = size_;
    size_ += (static_cast<size_t>(n) * sizeof(T) + 255) / 256 * 256;
    return at;
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

template <typename T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + offset);
}

inline int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

}  // namespace fp8lm::cuda::attention_detail
