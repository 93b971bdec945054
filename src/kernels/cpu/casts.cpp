#include "kernels/cpu/casts.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/cpu_features.h"
#include "kernels/cpu/row_reduce.h"

namespace fp8lm::cpu {
namespace {

// Splits [0, n) into one share per thread.
template <class F>
void for_shares(int64_t n, F body) {
  if (n < kParallelMin) return body(0, n);
#pragma omp parallel
  {
    const auto [lo, hi] = thread_share(n);
    if (lo < hi) body(lo, hi);
  }
}

bool use_avx512() {
  static const bool on = cpu_features().avx512;
  return on;
}
bool use_avx2() {
  static const bool on = cpu_features().avx2;
  return on;
}

std::array<bf16_t, 256> fp8_bf16_table(DType f) {
  std::array<bf16_t, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = bf16_from_float(fp8_decode(static_cast<uint8_t>(c), f));
  return t;
}

}  // namespace

void bf16_to_f32_serial(float* y, const bf16_t* x, int64_t n) {
  if (use_avx512()) return avx512::bf16_to_f32(y, x, n);
  if (use_avx2()) return avx2::bf16_to_f32(y, x, n);
  ref::bf16_to_f32(y, x, n);
}

void bf16_to_f32(float* y, const bf16_t* x, int64_t n) {
  for_shares(n, [&](int64_t lo, int64_t hi) { bf16_to_f32_serial(y + lo, x + lo, hi - lo); });
}

void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f) {
  for_shares(n, [&](int64_t lo, int64_t hi) {
    if (use_avx512()) return avx512::fp8_to_f32(y + lo, codes + lo, hi - lo, f);
    if (use_avx2()) return avx2::fp8_to_f32(y + lo, codes + lo, hi - lo, f);
    ref::fp8_to_f32(y + lo, codes + lo, hi - lo, f);
  });
}

void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, DType f) {
  static const std::array<bf16_t, 256> e4m3 = fp8_bf16_table(DType::E4M3);
  static const std::array<bf16_t, 256> e5m2 = fp8_bf16_table(DType::E5M2);
  const bf16_t* table = (f == DType::E4M3 ? e4m3 : e5m2).data();
  for_shares(n, [&](int64_t lo, int64_t hi) {
    if (use_avx512()) return avx512::fp8_to_bf16(y + lo, codes + lo, hi - lo, f);
    if (use_avx2()) return avx2::fp8_to_bf16(y + lo, codes + lo, hi - lo, f);
    for (int64_t i = lo; i < hi; ++i) y[i] = table[codes[i]];
  });
}

CastStats quantize_fp8_serial(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                              float scale, DType f) {
  return decoded ? quantize_decoded(codes, decoded, x, n, scale, f)
                 : quantize(codes, x, n, scale, f);
}

CastStats quantize_fp8(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                       DType f) {
  if (n < kParallelMin) return quantize_fp8_serial(codes, decoded, x, n, scale, f);
  float amax = 0.0f;
  int64_t saturated = 0, flushed = 0;
#pragma omp parallel reduction(max : amax) reduction(+ : saturated, flushed)
  {
    const auto [lo, hi] = thread_share(n);
    if (lo < hi) {
      const CastStats s = quantize_fp8_serial(codes + lo, decoded ? decoded + lo : nullptr, x + lo,
                                              hi - lo, scale, f);
      amax = s.amax;
      saturated = s.saturated;
      flushed = s.flushed;
    }
  }
  return {amax, saturated, flushed};
}

float absmax_parallel(const float* x, int64_t n) {
  if (n < kParallelMin) return absmax(x, n);
  float amax = 0.0f;
#pragma omp parallel reduction(max : amax)
  {
    const auto [lo, hi] = thread_share(n);
    if (lo < hi) amax = absmax(x + lo, hi - lo);
  }
  return amax;
}

void fp32_to_bf16_serial(bf16_t* y, const float* x, int64_t n) {
  if (use_avx512()) return avx512::fp32_to_bf16(y, x, n);
  if (use_avx2()) return avx2::fp32_to_bf16(y, x, n);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_from_float(x[i]);
}

void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) {
  for_shares(n, [&](int64_t lo, int64_t hi) { fp32_to_bf16_serial(y + lo, x + lo, hi - lo); });
}

void accumulate_into_bf16(bf16_t* acc, const float* x, int64_t n) {
  for_shares(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) acc[i] = bf16_from_float(bf16_to_float(acc[i]) + x[i]);
  });
}

void transpose_bytes(uint8_t* t, const uint8_t* x, int64_t rows, int64_t cols) {
  // Threads take rows of the transpose; the CPU's FP8 GEMMs never ask for one (only the
  // parity tests do), so plain loops serve.
  for_shares(cols, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t r = 0; r < rows; ++r) t[c * rows + r] = x[r * cols + c];
  });
}

}  // namespace fp8lm::cpu
