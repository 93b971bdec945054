// Quantize throughput, GB/s of FP32 read, for each ISA beside memcpy of the same FP32 buffer
// (the machine's copy bandwidth, measured in the same run). Goal: the vectorized path within
// 2x of memcpy. After the usual Google Benchmark table, a summary prints each path as a
// ratio of memcpy at the same size (medians, with --benchmark_repetitions=N).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fp8/quantize.h"

namespace {

using fp8lm::Isa;

std::vector<float> input(size_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const auto x = input(bytes / 4);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_quantize(benchmark::State& state, Isa isa) {
  if (!fp8lm::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const auto bytes = static_cast<size_t>(state.range(0));
  const auto x = input(bytes / 4);
  std::vector<uint8_t> q(x.size());
  for (auto _ : state) {
    auto stats = fp8lm::quantize(isa, q.data(), x.data(), static_cast<int64_t>(x.size()), 64.0f,
                                 fp8lm::DType::E4M3);
    benchmark::DoNotOptimize(stats);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

constexpr int64_t kMiB = 1 << 20;

// Remembers each run's GB/s so the summary can compare paths at the same size.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> gbps;  // "name/size" -> GB/s (the median when repeated)
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) gbps[r.run_name.str()] = it->second.value / 1e9;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

BENCHMARK(BM_memcpy)->Arg(kMiB)->Arg(64 * kMiB)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_quantize, scalar, Isa::Scalar)
    ->Arg(kMiB)
    ->Arg(64 * kMiB)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_quantize, avx2, Isa::Avx2)
    ->Arg(kMiB)
    ->Arg(64 * kMiB)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_quantize, avx512, Isa::Avx512)
    ->Arg(kMiB)
    ->Arg(64 * kMiB)
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nquantize E4M3 throughput, GB/s of FP32 read, and time relative to memcpy\n");
  std::printf("%-18s %10s %10s %14s\n", "path", "size", "GB/s", "time / memcpy");
  for (long long size : {kMiB, 64 * kMiB}) {
    char copy_name[64], name[64];
    std::snprintf(copy_name, sizeof copy_name, "BM_memcpy/%lld", size);
    const auto copy = reporter.gbps.find(copy_name);
    for (const char* path : {"memcpy", "scalar", "avx2", "avx512"}) {
      if (std::strcmp(path, "memcpy") == 0) {
        std::snprintf(name, sizeof name, "%s", copy_name);
      } else {
        std::snprintf(name, sizeof name, "BM_quantize/%s/%lld", path, size);
      }
      const auto it = reporter.gbps.find(name);
      if (it == reporter.gbps.end() || copy == reporter.gbps.end()) continue;
      std::printf("%-18s %7lld MiB %10.2f %13.2fx\n", path, size / kMiB, it->second,
                  copy->second / it->second);
    }
  }
  benchmark::Shutdown();
  return 0;
}
