#pragma once
// A training step's decision on the device (issue 34: a step need not wait for the host), and
// the copy that carries it out where the optimizer does not read it (a skipped step's roll-back
// of the FP8 scaling state).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace fp8lm::cuda {

// adamw::decide over losses[rows] and *norm (null: none): one block.
void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                 const float* bias_corrections, cudaStream_t stream);
// bytes from src to dst when *flag is non-zero.
void copy_if(void* dst, const void* src, size_t bytes, const int32_t* flag, cudaStream_t stream);

}  // namespace fp8lm::cuda
