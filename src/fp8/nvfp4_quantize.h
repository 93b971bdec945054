#pragma once
// NVFP4 quantization (TE's NVFP4BlockScaling): E2M1 values, an E4M3 scale per block of 16 and
// an FP32 global scale per tensor. The scalar twin of one block, as TE computes it
// (transformer_engine/common/cast/nvfp4/core_nvfp4.cuh: compute_global_encode_scaling_factor_FP4,
// compute_decoding_scaling_factor, and the quantize kernels' block_scale_inverse):
//   global encode scale S = 448 * 6 / global_amax, at most FLT_MAX; 1 when global_amax is 0 or
//                           S underflows to 0;
//   block scale b        = E4M3(block_amax * (S * (1/6))), the cast saturating;
//   code                 = E2M1(x * min(1 / (b * (1/S)), FLT_MAX)), round to nearest even;
//   value                = E2M1 value * b * (1/S).
// The block amax is taken as fmaxf takes it: NaNs left out.
#include <cstdint>

namespace fp8lm {

struct Nvfp4BlockScales {
  float global_encode = 1.0f;  // S
  uint8_t block_e4m3 = 0;      // b's code
  float block() const;         // b
  float decode() const;        // b * (1/S): what an E2M1 value is multiplied by
};

float nvfp4_global_encode_scale(float global_amax);

// One block of n values (any n; NVFP4 blocks are 16) under a tensor's amax: writes the E2M1
// codes (low 4 bits of each byte), returns the scales.
Nvfp4BlockScales nvfp4_quantize_block(uint8_t* codes, const float* x, int64_t n, float global_amax);

}  // namespace fp8lm
