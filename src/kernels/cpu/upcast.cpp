#include "kernels/cpu/upcast.h"

#include <omp.h>

#include <algorithm>

#include "core/cpu_features.h"

namespace fp8lm::cpu {
namespace {

// Below this many elements a parallel region costs more than the conversion.
constexpr int64_t kParallelMin = 1 << 15;

// Splits [0, n) into one contiguous share per thread, each a multiple of 64 elements so no
// two threads write the same cache line.
template <class F>
void for_shares(int64_t n, F body) {
  if (n < kParallelMin) return body(0, n);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t share = (n / nt + 63) / 64 * 64;
    const int64_t lo = std::min(n, t * share), hi = std::min(n, lo + share);
    if (lo < hi) body(lo, hi);
  }
}

bool use_avx512() {
  static const bool on = cpu_features().avx512;
  return on;
}

}  // namespace

void bf16_to_f32(float* y, const bf16_t* x, int64_t n) {
  for_shares(n, [&](int64_t lo, int64_t hi) {
    if (use_avx512()) return avx512::bf16_to_f32(y + lo, x + lo, hi - lo);
    ref::bf16_to_f32(y + lo, x + lo, hi - lo);
  });
}

void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, Fp8Format f) {
  for_shares(n, [&](int64_t lo, int64_t hi) {
    if (use_avx512()) return avx512::fp8_to_f32(y + lo, codes + lo, hi - lo, f);
    ref::fp8_to_f32(y + lo, codes + lo, hi - lo, f);
  });
}

}  // namespace fp8lm::cpu
