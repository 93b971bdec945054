// Block-scaled casts (block_cast.h): one thread per scale block takes its amax, its scale by
// the recipe's rule and each value's code (the CPU's own, core/ and fp8/: one source for host
// and device) and the BF16 operand (block_rules.cuh).
// NVFP4 first takes the RHT (one thread per column of a group of 16 rows) and the tensor's
// amax, which its global scale needs.
// Simple rather than fast: the emulated recipes' GEMMs dominate; a tiled kernel can replace it
// against the same parity tests.
#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "fp8/hadamard.h"
#include "fp8/nvfp4_quantize.h"
#include "kernels/cuda/block_cast.h"
#include "kernels/cuda/block_rules.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/quantize.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;

struct Blocks {
  int64_t rows, cols, block_rows, block_cols, grid_cols, count;
};

// Block b's rows [r0, r1) and columns [c0, c1), and the largest magnitude in it (NaN left out).
struct BlockSpan {
  int64_t r0, r1, c0, c1;
};
__device__ inline BlockSpan block_span(const Blocks& g, int64_t b) {
  const int64_t r0 = b / g.grid_cols * g.block_rows, c0 = b % g.grid_cols * g.block_cols;
  return {r0, r0 + g.block_rows < g.rows ? r0 + g.block_rows : g.rows, c0,
          c0 + g.block_cols < g.cols ? c0 + g.block_cols : g.cols};
}
__device__ inline float block_amax(const float* x, const Blocks& g, const BlockSpan& s) {
  float amax = 0.0f;
  for (int64_t r = s.r0; r < s.r1; ++r)
    for (int64_t c = s.c0; c < s.c1; ++c) amax = fmaxf(amax, fabsf(x[r * g.cols + c]));
  return amax;
}

template <DType F, bool kMx>
__global__ void block_cast_kernel(uint8_t* codes, void* scales, uint16_t* operand,
                                  float* tensor_scale_inv, const float* x, Blocks g,
                                  BlockScalingParams params) {
  if (global_thread() == 0) *tensor_scale_inv = 1.0f;
  for (int64_t b = global_thread(); b < g.count; b += grid_threads()) {
    const BlockSpan span = block_span(g, b);
    const float amax = block_amax(x, g, span);
    float multiplier, decode;
    if constexpr (kMx) {
      // max_norm_rcp: 1 / max rounded to FP32 once (a constant), then a product.
      constexpr auto max_rcp = static_cast<float>(1.0 / static_cast<double>(fp8_max(F)));
      const uint8_t s = e8m0_encode_round_up(amax * max_rcp);
      static_cast<uint8_t*>(scales)[b] = s;
      multiplier = e8m0_reciprocal(s);
      decode = e8m0_decode(s);
    } else {
      multiplier = fp8_block_scale(amax, F, params);
      decode = 1.0f / multiplier;
      static_cast<float*>(scales)[b] = decode;
    }
    for (int64_t r = span.r0; r < span.r1; ++r)
      for (int64_t c = span.c0; c < span.c1; ++c) {
        const int64_t i = r * g.cols + c;
        const uint8_t code = fp8_encode<F>(x[i] * multiplier);
        codes[i] = code;
        operand[i] = fp8_times_pow2_bf16<F>(code, decode);
      }
  }
}

template <DType F, bool kMx>
void launch(const BlockCast& c, const BlockCastOut& out, const float* x, cudaStream_t stream) {
  const BlockGrid& bg = c.grid;
  const Blocks g{bg.rows, bg.cols, bg.block_rows, bg.block_cols, bg.grid_cols(), bg.blocks()};
  block_cast_kernel<F, kMx><<<grid_stride_blocks(g.count, kThreads, 4096), kThreads, 0, stream>>>(
      out.codes, out.scales, out.operand, out.tensor_scale_inv, x, g, c.params);
  FP8LM_CUDA_CHECK_LAUNCH();
}

struct RhtSigns {
  float s[kRhtSize];
};

// rht16_rows, element for element: the same products, sums and differences in the same order,
// each rounded on its own (no fused multiply-add).
__global__ void rht16_kernel(float* y, const float* x, int64_t rows, int64_t cols, RhtSigns signs) {
  const int64_t columns = rows / kRhtSize * cols;
  for (int64_t t = global_thread(); t < columns; t += grid_threads()) {
    const int64_t g = t / cols * kRhtSize, c = t % cols;
    float v[kRhtSize];
    for (int i = 0; i < kRhtSize; ++i) v[i] = __fmul_rn(x[(g + i) * cols + c], signs.s[i]);
    for (int h = 1; h < kRhtSize; h *= 2)
      for (int i = 0; i < kRhtSize; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = __fadd_rn(a, b);
          v[j + h] = __fsub_rn(a, b);
        }
    for (int i = 0; i < kRhtSize; ++i) y[(g + i) * cols + c] = __fmul_rn(v[i], 0.25f);
  }
}

// nvfp4_quantize's rule (fp8/nvfp4_quantize.cpp) per block: an E4M3 scale of the block amax
// times the global scale over 6, each value times the scale's reciprocal cast to E2M1 (nearest,
// or stochastically with the draw of its place in the tensor), the operand E2M1 x E4M3 (exact).
template <bool kStochastic>
__global__ void nvfp4_kernel(uint8_t* codes, uint8_t* scales, uint16_t* operand,
                             float* tensor_scale_inv, const float* x, const float* tensor_amax,
                             Blocks g, uint32_t sr_key) {
  const float global = nvfp4_global_encode_scale(*tensor_amax);
  const float inv_global = __fdiv_rn(1.0f, global);
  if (global_thread() == 0) *tensor_scale_inv = inv_global;
  const float k = __fmul_rn(global, 1.0f / 6.0f);
  for (int64_t b = global_thread(); b < g.count; b += grid_threads()) {
    const BlockSpan span = block_span(g, b);
    const float amax = block_amax(x, g, span);
    const uint8_t s = fp8_encode<DType::E4M3>(__fmul_rn(amax, k));
    scales[b] = s;
    const float scale = fp8_value<DType::E4M3>(s);  // never a NaN code: amax is not NaN
    float multiplier = __fdiv_rn(1.0f, __fmul_rn(scale, inv_global));
    if (!(multiplier < 0x1.fffffep127f)) multiplier = 0x1.fffffep127f;
    for (int64_t r = span.r0; r < span.r1; ++r)
      for (int64_t c = span.c0; c < span.c1; ++c) {
        const int64_t i = r * g.cols + c;
        const float v = __fmul_rn(x[i], multiplier);
        const uint8_t code =
            kStochastic ? e2m1_encode_stochastic(v, counter_bits(sr_key, static_cast<uint32_t>(i)))
                        : e2m1_encode(v);
        codes[i] = code;
        operand[i] = bf16_from_float(__fmul_rn(e2m1_decode(code), scale));
      }
  }
}

void launch_nvfp4(const BlockCast& c, const BlockCastOut& out, const float* x, float* work,
                  cudaStream_t stream) {
  const BlockGrid& bg = c.grid;
  const int64_t n = bg.rows * bg.cols;
  float* amax = work + n;  // after the transformed tensor
  if (c.rht) {
    RhtSigns signs;
    for (int i = 0; i < kRhtSize; ++i) signs.s[i] = kRhtSigns[static_cast<size_t>(i)];
    rht16_kernel<<<grid_stride_blocks(bg.rows / kRhtSize * bg.cols, kThreads, 4096), kThreads, 0,
                   stream>>>(work, x, bg.rows, bg.cols, signs);
    FP8LM_CUDA_CHECK_LAUNCH();
    x = work;
  }
  FP8LM_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  absmax(amax, x, n, stream);
  const Blocks g{bg.rows, bg.cols, bg.block_rows, bg.block_cols, bg.grid_cols(), bg.blocks()};
  const auto blocks = grid_stride_blocks(g.count, kThreads, 4096);
  auto* scales = static_cast<uint8_t*>(out.scales);
  if (c.stochastic_rounding)
    nvfp4_kernel<true><<<blocks, kThreads, 0, stream>>>(out.codes, scales, out.operand,
                                                        out.tensor_scale_inv, x, amax, g, c.sr_key);
  else
    nvfp4_kernel<false><<<blocks, kThreads, 0, stream>>>(
        out.codes, scales, out.operand, out.tensor_scale_inv, x, amax, g, c.sr_key);
  FP8LM_CUDA_CHECK_LAUNCH();
  if (out.amax)
    FP8LM_CUDA_CHECK(
        cudaMemcpyAsync(out.amax, amax, sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

size_t block_cast_work_floats(const BlockCast& c) {
  return c.scheme == BlockScheme::Nvfp4 ? static_cast<size_t>(c.grid.rows * c.grid.cols) + 1 : 0;
}

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work,
                cudaStream_t stream) {
  if (c.grid.rows <= 0 || c.grid.cols <= 0) return;
  if (c.scheme == BlockScheme::Nvfp4) return launch_nvfp4(c, out, x, work, stream);
  const bool mx = c.scheme == BlockScheme::Mxfp8;
  if (c.format == DType::E4M3)
    mx ? launch<DType::E4M3, true>(c, out, x, stream)
       : launch<DType::E4M3, false>(c, out, x, stream);
  else
    mx ? launch<DType::E5M2, true>(c, out, x, stream)
       : launch<DType::E5M2, false>(c, out, x, stream);
}

}  // namespace fp8lm::cuda
