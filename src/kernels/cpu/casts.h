#pragma once
// Conversions between the GEMM operand types. Widening to FP32 is exact (every BF16, E4M3 and
// E5M2 value is an FP32 value); the GEMM engine uses it to run low-precision operands on FP32
// FMA units where those are faster than the CPU's BF16 dot-product instruction (gemm.h).
// Narrowing to BF16 rounds like bf16_from_float, bit for bit. Threads take contiguous shares;
// every element's bits depend on its own value only.
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"

namespace fp8lm::cpu {

void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f);
void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f);
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n);
// The same on the calling thread alone (a row inside a parallel region).
void fp32_to_bf16_serial(bf16_t* y, const float* x, int64_t n);
// acc = bf16(acc + x): a BF16 gradient accumulating an FP32 GEMM result (one rounding).
void accumulate_into_bf16(bf16_t* acc, const float* x, int64_t n);
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
