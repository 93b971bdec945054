#pragma once
// How fast this core runs BF16 dot products against FP32 FMAs, measured on one thread with
// register-only loops (no memory, no OpenMP), so that load from other processes cannot flip
// the answer: a preempted repetition only loses the min-of-N race. The GEMM engine choice
// (gemm.h) follows it.

namespace fp8lm::cpu {

struct Bf16Throughput {
  double fma_gflops = 0;     // vfmadd231ps zmm: 32 FLOPs each
  double dpbf16_gflops = 0;  // vdpbf16ps zmm: 64 FLOPs each
};

// Measured on the first call (about a millisecond) and remembered: the GEMM engine choice and
// doctor read the same figures. Zeros when the CPU lacks AVX512-BF16 (or is not x86-64).
const Bf16Throughput& bf16_throughput();

}  // namespace fp8lm::cpu
