// The block-scaled recipes' casts (fp8/block_cast.h) as a training step makes them, beside the
// cast the BF16 step makes of the same tensor (FP32 to BF16, the peer): nanoseconds per element
// and the ratio to that cast, for each recipe and TE role (input and gradient, row-wise and
// column-wise copies) on the tensor shapes of the demo model's GEMMs. Best of --reps; prints a
// table, then one JSON line.
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fp8/block_cast.h"
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
  std::vector<float> x(n), work(n + 1);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : x) v = normal(rng);
  std::vector<bf16_t> operand(n);
  std::vector<uint8_t> code_buf(n), scales(n * sizeof(float));
  float scale_inv = 1.0f, amax = 0.0f;

  const double bf16 = best_seconds(
      reps, [&] { cpu::fp32_to_bf16(operand.data(), x.data(), static_cast<int64_t>(n)); });
  const double per = 1e9 / static_cast<double>(n);
  fmt::print("{} x {}, {} threads; FP32 to BF16 (peer): {:.3f} ns/element\n", rows, cols,
             omp_get_max_threads(), bf16 * per);
  fmt::print("{:<8} {:<22} {:>10} {:>9}\n", "recipe", "tensor", "ns/elem", "vs bf16");
  const Case cases[] = {{"input", BlockRole::Input, false},
                        {"input columnwise", BlockRole::Input, true},
                        {"grad_output", BlockRole::GradOutput, false},
                        {"grad_output columnwise", BlockRole::GradOutput, true}};
  std::string json =
      fmt::format(R"({{"rows":{},"cols":{},"bf16_ns":{:.4f})", rows, cols, bf16 * per);
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    double total = 0.0;
    for (const Case& k : cases) {
      const std::string label = fmt::format("{} {}", scaling_kind_name(kind), k.name);
      if (label.find(only) == std::string::npos) continue;
      BlockCast c = recipe_block_cast(recipe, k.role, k.columnwise, rows, cols);
      c.sr_key = 12345;
      const BlockCastOut out{codes ? code_buf.data() : nullptr, scales.data(), operand.data(),
                             &scale_inv, &amax};
      const double s = best_seconds(reps, [&] { block_cast(c, out, x.data(), work.data()); });
      total += s;
      fmt::print("{:<8} {:<22} {:>10.3f} {:>8.2f}x\n", scaling_kind_name(kind), k.name, s * per,
                 s / bf16);
    }
    json += fmt::format(R"(,"{}_vs_bf16":{:.3f})", scaling_kind_name(kind), total / 4 / bf16);
  }
  fmt::print("{}}}\n", json);
  return 0;
}
