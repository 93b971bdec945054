#pragma once
// The arithmetic an op's functor (kernels/activation_ops.h) is written in, so that one source
// gives the same bits on the host and on the device: on the device every operation is an
// explicit round-to-nearest intrinsic, which nvcc never contracts into a fused multiply-add;
// on the host (the CPU's portable twins, and .cu files under tools/cuda_emu) the plain operator,
// which the build keeps unfused (-ffp-contract=off). Division and the square root are IEEE's,
// correctly rounded, on both.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP8LM_OP __host__ __device__ inline
#else
#define FP8LM_OP inline
#endif

namespace fp8lm::op_math {

FP8LM_OP float add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

FP8LM_OP float sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

FP8LM_OP float mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FP8LM_OP float div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FP8LM_OP float sqrt(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// x * 2^e, exact unless the result leaves the normal range (CUDA's ldexpf is exact too).
FP8LM_OP float ldexp(float x, int e) {
#ifdef __CUDA_ARCH__
  return ldexpf(x, e);
#else
  return std::ldexp(x, e);
#endif
}

FP8LM_OP uint32_t bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FP8LM_OP float from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// c ? a : b. On the host without a branch: under -ftrapping-math (the default) GCC keeps a
// float ternary as a branch when the code after it folds to constants on one side, and a loop
// with a branch is not vectorized; with masks the portable twins run four floats at a time even
// on baseline x86-64 (SSE2).
FP8LM_OP float select(bool c, float a, float b) {
#ifdef __CUDA_ARCH__
  return c ? a : b;
#else
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return from_bits((bits(a) & m) | (bits(b) & ~m));
#endif
}

}  // namespace fp8lm::op_math
