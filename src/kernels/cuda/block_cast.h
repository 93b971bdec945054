#pragma once
// Block-scaled casts on the device: fp8/block_cast.h's contract with the CPU's bits, for MXFP8
// and Float8BlockScaling (NVFP4 is not on the device yet: the backend refuses it by name).
// Pointers are device memory.
#include <cuda_runtime_api.h>

#include "fp8/block_cast.h"

namespace fp8lm::cuda {

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, cudaStream_t stream);

}  // namespace fp8lm::cuda
