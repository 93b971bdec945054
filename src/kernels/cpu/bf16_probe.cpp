#include "kernels/cpu/bf16_probe.h"

#include <algorithm>
#include <chrono>

#include "core/cpu_features.h"

namespace fp8lm::cpu {
namespace {

#if defined(__x86_64__)
// Twelve independent accumulators hide the instruction latency on every core measured, so
// the loops time issue throughput. Written in assembly so the compiler can neither fold nor
// reorder the chains.
#define FP8LM_X12(OP)                                                      \
  OP " %%zmm14, %%zmm15, %%zmm0\n\t" OP " %%zmm14, %%zmm15, %%zmm1\n\t" OP \
     " %%zmm14, %%zmm15, %%zmm2\n\t" OP " %%zmm14, %%zmm15, %%zmm3\n\t" OP \
     " %%zmm14, %%zmm15, %%zmm4\n\t" OP " %%zmm14, %%zmm15, %%zmm5\n\t" OP \
     " %%zmm14, %%zmm15, %%zmm6\n\t" OP " %%zmm14, %%zmm15, %%zmm7\n\t" OP \
     " %%zmm14, %%zmm15, %%zmm8\n\t" OP " %%zmm14, %%zmm15, %%zmm9\n\t" OP \
     " %%zmm14, %%zmm15, %%zmm10\n\t" OP " %%zmm14, %%zmm15, %%zmm11\n\t"
#define FP8LM_LOOP(OP)                                                                           \
  asm volatile(                                                                                  \
      "vpxord %%zmm14, %%zmm14, %%zmm14\n\tvpxord %%zmm15, %%zmm15, %%zmm15\n\t"                 \
      "1:\n\t" FP8LM_X12(OP) "dec %0\n\tjnz 1b\n\t"                                              \
      : "+r"(n)                                                                                  \
      :                                                                                          \
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
        "xmm11", "xmm14", "xmm15", "cc")

void fma_loop(long n) {
  FP8LM_LOOP("vfmadd231ps");
}
void dpbf16_loop(long n) {
  FP8LM_LOOP("vdpbf16ps");
}
#endif

Bf16Throughput measure() {
  Bf16Throughput t;
#if defined(__x86_64__)
  if (!cpu_features().avx512_bf16) return t;
  using Clock = std::chrono::steady_clock;
  constexpr long kIters = 20000;  // 240k instructions: about 0.1 ms
  double best_fma = 1e30, best_dp = 1e30;
  for (int rep = 0; rep < 9; ++rep) {
    auto t0 = Clock::now();
    fma_loop(kIters);
    best_fma = std::min(best_fma, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    dpbf16_loop(kIters);
    best_dp = std::min(best_dp, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  t.fma_gflops = kIters * 12.0 * 32.0 / best_fma / 1e9;
  t.dpbf16_gflops = kIters * 12.0 * 64.0 / best_dp / 1e9;
#endif
  return t;
}

}  // namespace

const Bf16Throughput& bf16_throughput() {
  static const Bf16Throughput t = measure();
  return t;
}

}  // namespace fp8lm::cpu
