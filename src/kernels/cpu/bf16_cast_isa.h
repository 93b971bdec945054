#pragma once
// The AVX-512 body behind gemm.h's fp32_to_bf16, in bf16_cast_avx512.cpp (the only file built
// with AVX-512 flags); gemm.cpp calls it after checking the CPU.
#include <cstdint>

#include "core/bf16.h"

namespace fp8lm::cpu::avx512 {

// y[i] = bf16_from_float(x[i]), bit for bit, on one thread.
void fp32_to_bf16(bf16_t* y, const float* x, int64_t n);

}  // namespace fp8lm::cpu::avx512
