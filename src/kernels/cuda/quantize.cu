// Element-wise casts (quantize.h): grid-stride loops, four elements per thread through 16-byte
// loads where the pointers allow it, one atomic per block for the statistics.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/quantize.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; more would only add atomics.
constexpr int64_t kMaxBlocks = 4096;

unsigned blocks_for(int64_t work) {
  return grid_stride_blocks(work, kThreads, kMaxBlocks);
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// kVec4: x is 16-byte and codes 4-byte aligned; the first n / 4 * 4 elements go as float4 and
// packed 4-byte stores, the rest one by one.
template <DType F, bool kVec4>
__global__ void quantize_kernel(uint8_t* codes, const float* x, int64_t n, const float* scale,
                                float* amax, unsigned long long* saturated,
                                unsigned long long* flushed) {
  const float s = scale ? *scale : 1.0f;
  Fp8Stats stats;
  int64_t head = 0;
  if constexpr (kVec4) {
    const int64_t n4 = n / 4;
    for (int64_t v = global_thread(); v < n4; v += grid_threads()) {
      const float4 xv = reinterpret_cast<const float4*>(x)[v];
      const uint32_t packed = static_cast<uint32_t>(fp8_encode_counted<F>(xv.x, s, stats)) |
                              static_cast<uint32_t>(fp8_encode_counted<F>(xv.y, s, stats)) << 8 |
                              static_cast<uint32_t>(fp8_encode_counted<F>(xv.z, s, stats)) << 16 |
                              static_cast<uint32_t>(fp8_encode_counted<F>(xv.w, s, stats)) << 24;
      reinterpret_cast<uint32_t*>(codes)[v] = packed;  // little-endian: element 4v first
    }
    head = n4 * 4;
  }
  for (int64_t i = head + global_thread(); i < n; i += grid_threads())
    codes[i] = fp8_encode_counted<F>(x[i], s, stats);
  commit_fp8_stats(stats, amax, saturated, flushed);
}

__global__ void absmax_kernel(float* amax, const float* x, int64_t n) {
  Fp8Stats stats;
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    stats.amax = fmaxf(stats.amax, fabsf(x[i]));
  commit_fp8_stats(stats, amax, nullptr, nullptr);
}

__global__ void fp32_to_bf16_kernel(uint16_t* y, const float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = bf16_from_float(x[i]);
}

__global__ void bf16_to_fp32_kernel(float* y, const uint16_t* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

template <DType F>
void launch_quantize(const Fp8Out& out, const float* x, int64_t n, cudaStream_t stream) {
  if (aligned(x, 16) && aligned(out.data, 4)) {
    quantize_kernel<F, true><<<blocks_for(n / 4), kThreads, 0, stream>>>(
        out.data, x, n, out.scale, out.amax, out.saturated, out.flushed);
  } else {
    quantize_kernel<F, false><<<blocks_for(n), kThreads, 0, stream>>>(
        out.data, x, n, out.scale, out.amax, out.saturated, out.flushed);
  }
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize(Fp8Out out, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (out.format == DType::E4M3) {
    launch_quantize<DType::E4M3>(out, x, n, stream);
  } else {
    launch_quantize<DType::E5M2>(out, x, n, stream);
  }
}

void absmax(float* amax, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  absmax_kernel<<<blocks_for(n), kThreads, 0, stream>>>(amax, x, n);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void fp32_to_bf16(bf16_t* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fp32_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void bf16_to_fp32(float* y, const bf16_t* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  bf16_to_fp32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
