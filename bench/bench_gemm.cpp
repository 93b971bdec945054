// This machine's GEMM peak per operand type, measured the way the training step runs them
// (fp8lm::cpu::gemm_*, 2 threads by default): best of several N³ products for FP32, and for
// BF16 and FP8 under each low-precision engine. Prints one JSON line; bench/cpu_bench.py uses
// the best engine's figure per type as the peak its efficiency columns divide by.
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace {

using namespace fp8lm;
using namespace fp8lm::cpu;

double best_gflops(int64_t n, int reps, const std::function<void()>& gemm) {
  gemm();  // builds the primitive, touches the pages
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best /
         1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 2048;
  int reps = 3, threads = 0;
  CLI::App app{"bench_gemm: GEMM GFLOP/s per operand type at N x N x N"};
  app.add_option("--size", n, "N")->check(CLI::Range(int64_t{16}, int64_t{8192}));
  app.add_option("--reps", reps, "timed repetitions (best is kept)")->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "0 = OpenMP's default")->check(CLI::Range(0, 1024));
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) omp_set_num_threads(threads);

  const size_t sz = static_cast<size_t>(n * n);
  std::vector<float> a(sz, 0.5f), b(sz, 0.25f), c(sz);
  std::vector<bf16_t> a16(sz, bf16_from_float(0.5f)), b16(sz, bf16_from_float(0.25f));
  std::vector<uint8_t> a8(sz, 0x30), b8(sz, 0x28);
  const double f32 = best_gflops(n, reps, [&] {
    gemm_f32(Trans::N, Trans::T, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data());
  });
  const LowPrecisionEngine chosen = low_precision_engine();
  std::string engines;
  for (LowPrecisionEngine e : {LowPrecisionEngine::NativeBf16, LowPrecisionEngine::WidenToFp32}) {
    set_low_precision_engine(e);
    const double bf16 = best_gflops(n, reps, [&] {
      gemm_bf16(Trans::N, Trans::T, n, n, n, 1.0f, a16.data(), b16.data(), 0.0f, c.data());
    });
    const double fp8 = best_gflops(n, reps, [&] {
      gemm_fp8(Trans::N, Trans::T, n, n, n, 1.0f, a8.data(), DType::E4M3, b8.data(), DType::E4M3,
               0.0f, c.data());
    });
    engines += fmt::format(R"({}"{}": {{"bf16": {:.1f}, "fp8": {:.1f}}})",
                           engines.empty() ? "" : ", ", engine_name(e), bf16, fp8);
  }
  fmt::print(R"({{"size": {}, "threads": {}, "fp32": {:.1f}, "engines": {{{}}}, "chosen": "{}"}})"
             "\n",
             n, omp_get_max_threads(), f32, engines, engine_name(chosen));
  return 0;
}
