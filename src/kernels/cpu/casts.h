#pragma once
// Conversions between the GEMM operand types. Widening to FP32 is exact (every BF16, E4M3 and
// E5M2 value is an FP32 value); the GEMM engine uses it to run low-precision operands on FP32
// FMA units where those are faster than the CPU's BF16 dot-product instruction (gemm.h).
// Narrowing to BF16 rounds like bf16_from_float, bit for bit. Threads take contiguous shares;
// every element's bits depend on its own value only.
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8/quantize.h"

namespace fp8lm::cpu {

void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
// The same on the calling thread alone (a row inside a parallel region).
void bf16_to_f32_serial(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f);
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f);
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n);
// The same on the calling thread alone (a row inside a parallel region).
void fp32_to_bf16_serial(bf16_t* y, const float* x, int64_t n);
// acc = bf16(acc + x): a BF16 gradient accumulating an FP32 GEMM result (one rounding).
void accumulate_into_bf16(bf16_t* acc, const float* x, int64_t n);
// fp8lm::quantize (fp8/quantize.h) over the threads' shares: the same codes and statistics as
// one call (a max and integer sums combine exactly in any order). Where decoded is not null,
// each code's value also goes there as BF16 (fp8lm::quantize_decoded): the operand the CPU's
// FP8 GEMMs multiply (Fp8Out::decoded), which spares them decoding the codes per call.
CastStats quantize_fp8(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                       DType f);
// The same on the calling thread alone (a row inside a parallel region).
CastStats quantize_fp8_serial(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                              float scale, DType f);
// fp8lm::absmax (max |x|, NaN ignored) over the threads' shares.
float absmax_parallel(const float* x, int64_t n);
// t [cols, rows] = x [rows, cols], bytes (FP8 codes).
void transpose_bytes(uint8_t* t, const uint8_t* x, int64_t rows, int64_t cols);

namespace ref {
void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f);
}  // namespace ref

namespace avx512 {
// Bodies for one thread's share (casts_avx512.cpp); callers check the CPU first.
void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f);
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f);
// y[i] = bf16_from_float(x[i]), bit for bit.
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n);
}  // namespace avx512

namespace avx2 {
// The same bodies on eight lanes (casts_avx2.cpp), for CPUs with AVX2 and F16C.
void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f);
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f);
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n);
}  // namespace avx2

}  // namespace fp8lm::cpu
