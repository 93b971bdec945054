// The block-scaled recipes' casts (fp8/block_cast.h) as a training step makes them, beside the
// cast the BF16 step makes of the same tensor (FP32 to BF16, the peer) and the memory bandwidth
// measured on it: for each recipe and TE role (input and gradient, row-wise and column-wise
// copies, then both copies as one block_cast_pair, as a Linear casts them for its two GEMMs),
// nanoseconds per element, the ratio to the peer, the bytes per element the cast moves
// (block_cast_traffic, block_cast_pair_traffic) and the share of the bandwidth that makes (near
// 100%: the cast waits on memory; far below: on arithmetic). Best of --reps; prints a table,
// then one JSON line.
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>

#include "fp8/block_cast.h"
#include "fp8/quantize.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "kernels/cpu/casts.h"

namespace {

using namespace fp8lm;

double best_seconds(int reps, const std::function<void()>& f) {
  f();  // touches the pages
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Case {
  const char* name;
  BlockRole role;
  bool columnwise;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 1024;
  int reps = 20, threads = 0;
  bool codes = false;
  std::string only;
  CLI::App app{"bench_block_cast: the block-scaled casts against FP32 to BF16"};
  app.add_option("--rows", rows, "tokens")->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--cols", cols, "features")->check(CLI::Range(int64_t{16}, int64_t{1} << 16));
  app.add_option("--reps", reps, "timed repetitions (best is kept)")->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "0 = OpenMP's default")->check(CLI::Range(0, 1024));
  app.add_flag("--codes", codes, "keep the codes too (as statistics or a device need them)");
  app.add_option("--only", only, "only the casts whose \"recipe tensor\" contains this");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) omp_set_num_threads(threads);

  const size_t n = static_cast<size_t>(rows * cols);
  // The CPU backend's buffers, 64-byte aligned as the training step's are: a std::vector's
  // large block starts 16 bytes past a page, and there each row's 64-byte loads straddle two
  // cache lines; at 1024 columns (rows 4 KiB apart) the column-wise casts then ran 30-45% slower
  // a value than from aligned rows.
  Backend& be = cpu_backend();
  BackendBuffer<float> x(be, n), work(be, n + 1);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (size_t i = 0; i < n; ++i) x.data()[i] = normal(rng);
  BackendBuffer<bf16_t> operand(be, n);
  BackendBuffer<uint8_t> code_buf(be, n), scales(be, n * sizeof(float));
  BackendBuffer<bf16_t> col_operand(be, n);  // a pair's column-wise copy
  BackendBuffer<uint8_t> col_codes(be, n), col_scales(be, n * sizeof(float));
  float scale_inv = 1.0f;

  // The memory's speed on this tensor, three ways: a read (absmax), a copy, and the peer (FP32
  // read, BF16 written). The fastest is the bandwidth the casts are held against.
  const auto inputs = static_cast<int64_t>(n);
  volatile float amax_read = 0.0f;  // kept, so that the read is not optimized away
  const double read =
      best_seconds(reps, [&] { amax_read = cpu::absmax_parallel(x.data(), inputs); });
  const double copy = best_seconds(reps, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < inputs; ++i) work.data()[i] = x.data()[i];
  });
  const double bf16 =
      best_seconds(reps, [&] { cpu::fp32_to_bf16(operand.data(), x.data(), inputs); });
  const double per = 1e9 / static_cast<double>(n);
  const auto gbs = [&](double bytes_per_value, double seconds) {
    return bytes_per_value * static_cast<double>(n) / seconds / 1e9;
  };
  const double bandwidth = std::max({gbs(4, read), gbs(8, copy), gbs(6, bf16)});
  fmt::print("{} x {}, {} threads\n", rows, cols, omp_get_max_threads());
  fmt::print(
      "memory: read {:.1f}, copy {:.1f}, FP32 to BF16 (peer) {:.1f} GB/s ({:.3f} ns/element)\n",
      gbs(4, read), gbs(8, copy), gbs(6, bf16), bf16 * per);
  fmt::print("{:<8} {:<22} {:>10} {:>9} {:>11} {:>7} {:>10}\n", "recipe", "tensor", "ns/elem",
             "vs bf16", "bytes/elem", "GB/s", "of memory");
  const Case cases[] = {{"input", BlockRole::Input, false},
                        {"input columnwise", BlockRole::Input, true},
                        {"grad_output", BlockRole::GradOutput, false},
                        {"grad_output columnwise", BlockRole::GradOutput, true}};
  const auto print_row = [&](ScalingKind kind, const std::string& tensor, double s, int64_t moved) {
    const double bytes = static_cast<double>(moved) / static_cast<double>(n);
    const double speed = gbs(bytes, s);
    fmt::print("{:<8} {:<22} {:>10.3f} {:>8.2f}x {:>11.2f} {:>7.1f} {:>9.0f}%\n",
               scaling_kind_name(kind), tensor, s * per, s / bf16, bytes, speed,
               100 * speed / bandwidth);
  };
  // Whether --only asks for this row ("recipe tensor").
  const auto wanted = [&](ScalingKind kind, const std::string& tensor) {
    return fmt::format("{} {}", scaling_kind_name(kind), tensor).find(only) != std::string::npos;
  };
  // No amax asked for: a training step's casts take none (Linear::block_cast_job). A pair's
  // column-wise copy writes an operand, codes and scales of its own, as the step's do.
  float col_scale_inv = 1.0f;
  const BlockCastOut out{codes ? code_buf.data() : nullptr, scales.data(), operand.data(),
                         &scale_inv, nullptr};
  const BlockCastOut col_out{codes ? col_codes.data() : nullptr, col_scales.data(),
                             col_operand.data(), &col_scale_inv, nullptr};
  // The casts' instruction set: what some casts move depends on it (block_cast_pair_traffic).
  std::string json =
      fmt::format(R"({{"rows":{},"cols":{},"isa":"{}","bf16_ns":{:.4f},"bandwidth_gbs":{:.2f})",
                  rows, cols, isa_name(best_isa()), bf16 * per, bandwidth);
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    double total = 0.0;
    for (const Case& k : cases) {
      if (!wanted(kind, k.name)) continue;
      BlockCast c = recipe_block_cast(recipe, k.role, k.columnwise, rows, cols);
      c.sr_key = 12345;
      const double s = best_seconds(reps, [&] { block_cast(c, out, x.data(), work.data()); });
      total += s;
      print_row(kind, k.name, s, block_cast_traffic(c, out));
    }
    json += fmt::format(R"(,"{}_vs_bf16":{:.3f})", scaling_kind_name(kind), total / 4 / bf16);
    // Both copies of one tensor in one call: for NVFP4 one amax sweep serves both, where the
    // rows above sweep once each.
    for (const BlockRole role : {BlockRole::Input, BlockRole::GradOutput}) {
      const std::string tensor = role == BlockRole::Input ? "input pair" : "grad_output pair";
      if (!wanted(kind, tensor)) continue;
      BlockCast row = recipe_block_cast(recipe, role, false, rows, cols);
      BlockCast col = recipe_block_cast(recipe, role, true, rows, cols);
      row.sr_key = 12345;
      col.sr_key = 54321;
      const double s = best_seconds(
          reps, [&] { block_cast_pair(row, out, col, col_out, x.data(), work.data()); });
      print_row(kind, tensor, s, block_cast_pair_traffic(row, out, col, col_out));
    }
  }
  fmt::print("{}}}\n", json);
  return 0;
}
