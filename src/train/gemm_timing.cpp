#include "train/gemm_timing.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/counter_rng.h"
#include "kernels/backend_buffer.h"

namespace fp8lm {
namespace {

// Random operands: zeros would flatter the tensor cores (they draw less power on them).
std::vector<bf16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<bf16_t> v(n);
  const uint32_t key = counter_key(seed);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = counter_bits(key, static_cast<uint32_t>(i));
    v[i] = bf16_from_float(static_cast<float>(bits >> 8) * 0x1p-23f - 1.0f);  // in [-1, 1)
  }
  return v;
}

// E4M3 codes, every one but NaN's (0x7f and 0xff).
std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  const uint32_t key = counter_key(seed);
  for (size_t i = 0; i < n; ++i) {
    const auto code = static_cast<uint8_t>(counter_bits(key, static_cast<uint32_t>(i)) % 254);
    v[i] = code >= 0x7f ? static_cast<uint8_t>(code + 1) : code;
  }
  return v;
}

// The median seconds of one call of f, each call waited for (a download of 4 bytes).
template <class F>
double median_seconds(Backend& be, const float* sync, int warmup, int reps, F f) {
  float sink = 0;
  for (int i = 0; i < warmup; ++i) f();
  be.download(&sink, sync, sizeof sink);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    be.download(&sink, sync, sizeof sink);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[static_cast<size_t>(reps / 2)];
}

}  // namespace

MeasuredGemm time_gemm(Backend& be, const GemmShape& g, int warmup, int reps) {
  const auto a = static_cast<size_t>(g.M * g.K), b = static_cast<size_t>(g.N * g.K);
  BackendBuffer<float> c(be, static_cast<size_t>(g.M * g.N));
  BackendBuffer<float> scale_inv(be, std::vector<float>{1.0f / 64});
  MeasuredGemm m;
  {
    BackendBuffer<bf16_t> A(be, random_bf16(a, 1)), B(be, random_bf16(b, 2));
    const GemmOperand ga{A.data(), DType::BF16}, gb{B.data(), DType::BF16};
    m.bf16_s = median_seconds(be, c.data(), warmup, reps, [&] {
      be.gemm(Trans::N, Trans::T, g.M, g.N, g.K, 1.0f, ga, gb, 0.0f, c.data());
    });
  }
  BackendBuffer<uint8_t> A(be, random_e4m3(a, 3)), B(be, random_e4m3(b, 4));
  const GemmOperand ga{A.data(), DType::E4M3, scale_inv.data()},
      gb{B.data(), DType::E4M3, scale_inv.data()};
  m.fp8_s = median_seconds(be, c.data(), warmup, reps, [&] {
    be.gemm(Trans::N, Trans::T, g.M, g.N, g.K, 1.0f, ga, gb, 0.0f, c.data());
  });
  return m;
}

}  // namespace fp8lm
