#pragma once
// NVFP4 quantization (TE's NVFP4BlockScaling): E2M1 values, an E4M3 scale per block of 16 and
// an FP32 global scale per tensor. The rules, as TE computes them
// (transformer_engine/common/cast/nvfp4/core_nvfp4.cuh: compute_global_encode_scaling_factor_FP4,
// compute_decoding_scaling_factor, and the quantize kernels' block_scale_inverse):
//   global encode scale S = 448 * 6 / global_amax, at most FLT_MAX; 1 when global_amax is 0 or
//                           S underflows to 0;
//   block scale b        = E4M3(block_amax * (S * (1/6))), the cast saturating;
//   code                 = E2M1(x * min(1 / (b * (1/S)), FLT_MAX)), round to nearest even, or
//                          stochastically (gradients; core/e2m1.h, e2m1_encode_stochastic);
//   value                = E2M1 value * b * (1/S).
// The block amax is taken as fmaxf takes it: NaNs left out. Blocks are 1x16 along rows for the
// row-wise copy, 16x1 down columns for the column-wise copy (each quantized from the
// high-precision tensor; TE's column-wise copy is transposed, ours keeps x's layout) and 16x16
// for weights (TE's 2D quantization: one quantization serves both directions). Codes are one
// per byte, in the low 4 bits: emulation trades the packing for plain indexing.
#include <cstdint>

#include "core/op_math.h"
#include "fp8/block_grid.h"

namespace fp8lm {

inline constexpr int64_t kNvfp4Block = 16;

constexpr BlockGrid nvfp4_rowwise(int64_t rows, int64_t cols) {
  return {rows, cols, 1, kNvfp4Block};
}
constexpr BlockGrid nvfp4_columnwise(int64_t rows, int64_t cols) {
  return {rows, cols, kNvfp4Block, 1};
}
constexpr BlockGrid nvfp4_2d(int64_t rows, int64_t cols) {
  return {rows, cols, kNvfp4Block, kNvfp4Block};
}

struct Nvfp4BlockScales {
  float global_encode = 1.0f;  // S
  uint8_t block_e4m3 = 0;      // b's code
  float block() const;         // b
  float decode() const;        // b * (1/S): what an E2M1 value is multiplied by
};

// S (host and device: core/op_math.h); a NaN or Inf quotient is FLT_MAX, as fminf gives.
FP8LM_OP float nvfp4_global_encode_scale(float global_amax) {
  float s = op_math::div(2688.0f, global_amax);  // E4M3's max 448 times E2M1's 6
  if (!(s < 0x1.fffffep127f)) s = 0x1.fffffep127f;
  return global_amax == 0.0f || s == 0.0f ? 1.0f : s;
}

// One block of n values (any n) under a tensor's amax, rounded to nearest: writes the E2M1
// codes, returns the scales (what `fp8lm fp8 encode --block` shows).
Nvfp4BlockScales nvfp4_quantize_block(uint8_t* codes, const float* x, int64_t n, float global_amax);

// codes [rows, cols] in x's layout; block_scales: E4M3 codes, one per block of g in grid order.
// global_amax is the tensor's (its amax, or after a Hadamard transform the transform's). With
// sr_key, stochastic rounding with element i drawing counter_bits(*sr_key, i).
// first_index: x[0]'s place in its tensor, where g is a stripe of a larger one (the draws
// follow the place).
// nvfp4_quantize, also writing the GEMM operand (fp8/block_cast.h): E2M1 value x E4M3 block
// scale in BF16, from the codes as they are made. codes may be null (not kept). With rht, the
// cast is of rht16_rows(x) (g column-wise, rows a multiple of 16), the transform never written
// where the CPU keeps it in registers (AVX-512: 1D blocks in one pass, 16x16 ones a stripe of
// sixteen rows at a time; fp8/nvfp4_avx512.cpp).
void nvfp4_quantize_to_bf16(uint8_t* codes, uint8_t* block_scales, bf16_t* operand, const float* x,
                            const BlockGrid& g, float global_amax, const uint32_t* sr_key,
                            int64_t first_index, bool rht = false);
void nvfp4_quantize(Isa isa, uint8_t* codes, uint8_t* block_scales, const float* x,
                    const BlockGrid& g, float global_amax, const uint32_t* sr_key = nullptr,
                    int64_t first_index = 0);
void nvfp4_quantize_reference(uint8_t* codes, uint8_t* block_scales, const float* x,
                              const BlockGrid& g, float global_amax,
                              const uint32_t* sr_key = nullptr, int64_t first_index = 0);

// y = E2M1 value * b * (1/S), each block's.
void nvfp4_dequantize(float* y, const uint8_t* codes, const uint8_t* block_scales,
                      const BlockGrid& g, float global_amax);

}  // namespace fp8lm
