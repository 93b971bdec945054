#pragma once
// Widening conversions to FP32, all exact: every BF16, E4M3 and E5M2 value is an FP32 value.
// The GEMM engine uses them to run low-precision operands on FP32 FMA units where those are
// faster than the CPU's BF16 dot-product instruction (gemm.h).
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"

namespace fp8lm::cpu {

void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, Fp8Format f);

namespace ref {
void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, Fp8Format f);
}  // namespace ref

namespace avx512 {
// Bodies for one thread's share (upcast_avx512.cpp); callers check the CPU first.
void bf16_to_f32(float* y, const bf16_t* x, int64_t n);
void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, Fp8Format f);
}  // namespace avx512

}  // namespace fp8lm::cpu
