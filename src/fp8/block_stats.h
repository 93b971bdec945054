#pragma once
// What a block-scaled cast did to one tensor (issue 14: inspect and the report show it per GEMM
// and tensor role). Each block's decode multiplier (the E8M0 scale, the FP32 scale_inv, or
// NVFP4's E4M3 block scale over the tensor scale S) goes into a histogram of its power of two;
// a block is saturated when the cast clipped some input (beyond max times the block's
// multiplier by more than rounding: block_stats.cpp), and flushed when it had non-zero inputs but
// every code is zero.
#include <cstdint>
#include <map>

#include "fp8/block_cast.h"

namespace fp8lm {

struct BlockScaleStats {
  int64_t blocks = 0;
  int64_t zero_blocks = 0;  // every input zero: no multiplier to speak of
  int64_t saturated_blocks = 0;
  int64_t flushed_blocks = 0;
  std::map<int, int64_t> exponents;  // floor(log2(multiplier)) -> blocks
  float tensor_scale = 1.0f;         // NVFP4's S; 1 for the FP8 recipes
};

// x: the values the cast quantized (after the RHT where there was one); codes and scales as
// block_cast wrote them; tensor_scale_inv its 1/S.
BlockScaleStats block_scale_stats(const BlockCast& c, const float* x, const uint8_t* codes,
                                  const void* scales, float tensor_scale_inv);

}  // namespace fp8lm
