#pragma once
// Block-scaled casts on the device: fp8/block_cast.h's contract with the CPU's bits, for MXFP8,
// Float8BlockScaling and NVFP4 (its RHT, global scale and stochastic rounding included).
// Pointers are device memory.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "fp8/block_cast.h"

namespace fp8lm::cuda {

// The floats of device work memory a cast needs (NVFP4: the transformed tensor and its amax).
size_t block_cast_work_floats(const BlockCast& c);
// The RHT on c.grid.rows not a multiple of 16 is the caller's to refuse (fp8::block_cast's
// message); `work` holds block_cast_work_floats(c).
void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work,
                cudaStream_t stream);
// A tensor's row-wise and column-wise FP8 casts (fp8/block_cast.h's block_cast_pair: 1 x W and
// W x 1 blocks of one scheme and format) in one kernel, the same bits as two block_cast calls;
// false, having done nothing, for pairs it does not take (NVFP4, other grids).
bool block_cast_pair(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                     const BlockCastOut& col_out, const float* x, cudaStream_t stream);
// The BF16 operand a cast would have written (BlockCastOut::operand), [rows, cols], from its
// codes (stored transposed or not) and block scales: what a GEMM that declines the codes
// multiplies when the cast kept no operand.
void block_decode_bf16(const BlockCodes& b, bf16_t* operand, cudaStream_t stream);

}  // namespace fp8lm::cuda
