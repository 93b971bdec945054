#pragma once
// Casts on the device: FP32 -> FP8 with a device scale and amax (the FP8 codec of
// core/fp8_dtype.h bit for bit, saturating), FP32 <-> BF16, and the FP8 transpose that
// cuBLASLt's FP8 GEMMs need for their transposed operands, alone or fused with the cast.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/tensor.h"

namespace fp8lm::cuda {

// out.data[i] = cast(x[i] * *out.scale); *out.amax = max(*out.amax, max|x|).
void quantize(Fp8Out out, const float* x, int64_t n, cudaStream_t stream);
// max|x| (NaN ignored) max-accumulated into *amax.
void absmax(float* amax, const float* x, int64_t n, cudaStream_t stream);

// Round to nearest even, as core/bf16.h.
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n, cudaStream_t stream);
void bf16_to_fp32(float* y, const bf16_t* x, int64_t n, cudaStream_t stream);

// Transposes FP8 codes [rows, cols] -> [cols, rows].
void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows, int64_t cols,
                   cudaStream_t stream);
// quantize of x [rows, cols] into out.data (skipped where null) and its transpose [cols, rows]
// into transposed, from one read of x (TE's cast_transpose); statistics as quantize.
void quantize_transposed(Fp8Out out, uint8_t* transposed, const float* x, int64_t rows,
                         int64_t cols, cudaStream_t stream);

}  // namespace fp8lm::cuda
