// Block-scaled casts (block_cast.h): one thread per scale block takes its amax, its scale by
// the recipe's rule (block_rules.cuh), each value's code (fp8_codec.cuh) and the BF16 operand.
// Simple rather than fast: the emulated recipes' GEMMs dominate; a tiled kernel can replace it
// against the same parity tests.
#include "kernels/cuda/block_cast.h"
#include "kernels/cuda/block_rules.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;

struct Blocks {
  int64_t rows, cols, block_rows, block_cols, grid_cols, count;
};

template <Fp8Format F, bool kMx>
__global__ void block_cast_kernel(uint8_t* codes, void* scales, uint16_t* operand,
                                  float* tensor_scale_inv, const float* x, Blocks g,
                                  bool power_2_scale, float amax_epsilon) {
  constexpr float fp8_max = F == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  if (global_thread() == 0) *tensor_scale_inv = 1.0f;
  for (int64_t b = global_thread(); b < g.count; b += grid_threads()) {
    const int64_t r0 = b / g.grid_cols * g.block_rows, c0 = b % g.grid_cols * g.block_cols;
    const int64_t r1 = r0 + g.block_rows < g.rows ? r0 + g.block_rows : g.rows;
    const int64_t c1 = c0 + g.block_cols < g.cols ? c0 + g.block_cols : g.cols;
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = fmaxf(amax, fabsf(x[r * g.cols + c]));
    float multiplier, decode;
    if constexpr (kMx) {
      // max_norm_rcp: 1 / max rounded to FP32 once (a constant), then a product.
      constexpr auto max_rcp = static_cast<float>(1.0 / static_cast<double>(fp8_max));
      const uint8_t s = e8m0_round_up(amax * max_rcp);
      static_cast<uint8_t*>(scales)[b] = s;
      multiplier = e8m0_rcp(s);
      decode = e8m0_value(s);
    } else {
      multiplier = block_scale(amax, fp8_max, power_2_scale, amax_epsilon);
      decode = 1.0f / multiplier;
      static_cast<float*>(scales)[b] = decode;
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t i = r * g.cols + c;
        const uint8_t code = fp8_encode_sat<F>(x[i] * multiplier).code;
        codes[i] = code;
        operand[i] = fp8_times_pow2_bf16<F>(code, decode);
      }
  }
}

template <Fp8Format F, bool kMx>
void launch(const BlockCast& c, const BlockCastOut& out, const float* x, cudaStream_t stream) {
  const BlockGrid& bg = c.grid;
  const Blocks g{bg.rows, bg.cols, bg.block_rows, bg.block_cols, bg.grid_cols(), bg.blocks()};
  block_cast_kernel<F, kMx><<<grid_stride_blocks(g.count, kThreads, 4096), kThreads, 0, stream>>>(
      out.codes, out.scales, out.operand, out.tensor_scale_inv, x, g, c.params.power_2_scale,
      c.params.amax_epsilon);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, cudaStream_t stream) {
  if (c.grid.rows <= 0 || c.grid.cols <= 0) return;
  const bool mx = c.scheme == BlockScheme::Mxfp8;
  if (c.format == Fp8Format::E4M3)
    mx ? launch<Fp8Format::E4M3, true>(c, out, x, stream)
       : launch<Fp8Format::E4M3, false>(c, out, x, stream);
  else
    mx ? launch<Fp8Format::E5M2, true>(c, out, x, stream)
       : launch<Fp8Format::E5M2, false>(c, out, x, stream);
}

}  // namespace fp8lm::cuda
