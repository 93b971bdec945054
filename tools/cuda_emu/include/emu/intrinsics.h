#pragma once
// Device math intrinsics. The _rn forms are IEEE operations rounded to nearest, which host
// float arithmetic is (the build passes -ffp-contract=off, so nothing fuses them).
#include <math.h>

#include <bit>
#include <cstdint>

inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fsqrt_rn(float a) {
  return sqrtf(a);
}
inline float __frcp_rn(float a) {
  return 1.0f / a;
}
inline float __fmaf_rn(float a, float b, float c) {
  return fmaf(a, b, c);
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline double __fma_rn(double a, double b, double c) {
  return fma(a, b, c);
}
// The fast approximations: here the accurate functions, a tighter result than the GPU's.
inline float __expf(float a) {
  return expf(a);
}
inline float __logf(float a) {
  return logf(a);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float rsqrtf(float a) {
  return 1.0f / sqrtf(a);
}

inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
inline float __uint_as_float(unsigned u) {
  return std::bit_cast<float>(u);
}
inline int __float_as_int(float x) {
  return std::bit_cast<int>(x);
}
inline float __int_as_float(int i) {
  return std::bit_cast<float>(i);
}
inline long long __double_as_longlong(double x) {
  return std::bit_cast<long long>(x);
}
inline double __longlong_as_double(long long i) {
  return std::bit_cast<double>(i);
}

inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __popcll(unsigned long long x) {
  return std::popcount(x);
}
inline int __clz(int x) {
  return std::countl_zero(static_cast<unsigned>(x));
}
inline int __ffs(int x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
