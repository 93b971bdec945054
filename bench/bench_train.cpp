// Times training steps of one model configuration in one precision and prints one JSON line:
// tokens/s over the steps after the warmup ones (which build GEMM primitives), seconds per
// step, and the process's peak RSS. bench/cpu_bench.py runs it beside the PyTorch peer. Under
// mpirun it trains data parallel (--batch-size is the global batch) and rank 0 alone prints,
// adding the time and bytes per step in collectives (bench/data_parallel_bench.py).
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "dist/communicator.h"
#include "fp8/recipe.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/device_query.h"
#include "kernels/cuda/op_times.h"
#include "kernels/op_times.h"
#include "kernels/traffic.h"
#include "nn/fusion.h"
#include "nn/scratch.h"
#include "train/adamw.h"
#include "train/run_loop.h"
#include "train/trainer.h"

namespace {

// Where the memory goes, in MiB: FP32 master weights, their gradients, AdamW's two moments
// (this rank's share under --zero 1), the weight casts the GEMMs keep, the tensors saved from
// forward for backward, and workspace (the shared per-role scratch and the GEMM operand
// buffers).
std::string memory_json(fp8lm::GPT& model, const fp8lm::AdamW& opt) {
  size_t masters = 0, grads = 0, moments = 0;  // masters: fewer under ZeRO-1 with FP8 weights
  for (const fp8lm::Parameter* p : model.parameters()) {
    masters += p->value.bytes();
    grads += p->grad_bytes();
  }
  for (size_t i = 0; i < opt.parameters().size(); ++i)
    moments += opt.first_moment_buffer(i).bytes() + opt.second_moment_buffer(i).bytes();
  const fp8lm::MemoryUse use = model.memory_use();
  const double mb = 1 << 20;  // MiB, as peak_rss_mb
  return fmt::format(
      R"({{"weights": {:.0f}, "gradients": {:.0f}, "optimizer": {:.0f}, "weight_casts": {:.0f}, "saved_activations": {:.0f}, "workspace": {:.0f}}})",
      static_cast<double>(masters) / mb, static_cast<double>(grads) / mb,
      static_cast<double>(moments) / mb, static_cast<double>(use.weight_casts) / mb,
      static_cast<double>(use.saved) / mb,
      static_cast<double>(fp8lm::scratch_footprint() + fp8lm::cpu::gemm_workspace_bytes()) / mb);
}

// A profiled step's seconds by kind of op (a GPU's device time, a CPU's wall time in the
// backend's entry points), and "idle": the step's wall time they leave.
std::string op_seconds_json(const fp8lm::OpTimes& t, double step_seconds) {
  std::string out = "{";
  double busy = 0;
  for (int k = 0; k < fp8lm::kOpKinds; ++k) {
    const auto i = static_cast<size_t>(k);
    out += fmt::format(R"("{}": {:.6f}, )", fp8lm::op_kind_name(static_cast<fp8lm::OpKind>(k)),
                       t.seconds[i]);
    busy += t.seconds[i];
  }
  return out +
         fmt::format(R"("idle": {:.6f}, "step": {:.6f}}})", step_seconds - busy, step_seconds);
}

}  // namespace

int main(int argc, char** argv) {
  fp8lm::TrainConfig c;
  std::string precision = "fp32";
  std::string device = "cpu";
  int64_t warmup_steps = 2;
  CLI::App app{"bench_train: tokens/s of fp8lm training steps"};
  app.add_option("--vocab", c.model.vocab);
  app.add_option("--seq-len", c.model.seq_len);
  app.add_option("--d-model", c.model.d_model);
  app.add_option("--n-layers", c.model.n_layers);
  app.add_option("--n-heads", c.model.n_heads);
  app.add_option("--ffn", c.model.ffn);
  app.add_option("--batch-size", c.batch_size);
  app.add_option("--steps", c.steps, "timed steps");
  app.add_option("--warmup-steps", warmup_steps, "untimed steps first");
  app.add_option("--precision", precision, "fp32|bf16|fp8");
  std::string recipe = "delayed";
  app.add_option("--recipe", recipe, "delayed|current|block|mxfp8|nvfp4 (fp8)");
  app.add_option("--device", device, "cpu|cuda|cuda:N|auto (default cpu)");
  app.add_option("--threads", c.threads);
  app.add_option("--zero", c.zero, "1: shard the optimizer state across mpirun's ranks");
  app.add_option("--grad-bucket-mb", c.grad_bucket_mb,
                 "MiB per gradient all-reduce bucket (0: one, after backward)");
  std::string grad_reduce = "fp32";
  app.add_option("--grad-reduce", grad_reduce, "fp32|bf16: the type gradients are reduced in");
  bool no_fusion = false;
  app.add_flag("--no-fusion", no_fusion, "the unfused kernel twins");
  bool no_cuda_graphs = false;
  app.add_flag("--no-cuda-graphs", no_cuda_graphs, "a GPU step's ops launched one by one");
  app.add_flag("--fp8-weights", c.fp8_weights, "module weights only as FP8");
  CLI11_PARSE(app, argc, argv);
  try {
    c.precision = fp8lm::parse_precision(precision);
    c.recipe.kind = fp8lm::parse_scaling_kind(recipe);
    c.fusion = !no_fusion;
    if (grad_reduce != "fp32" && grad_reduce != "bf16")
      throw fp8lm::Error("--grad-reduce: '" + grad_reduce + "' is not fp32 or bf16");
    c.bf16_grad_reduce = grad_reduce == "bf16";
    c.steps += warmup_steps;
    c.evaluate = false;
    c.device = fp8lm::parse_device(device);
    const fp8lm::DeviceChoice dev = fp8lm::resolve_device(c.device);
    size_t gpu_bytes = 0;  // device memory in use at the last step (nothing is freed before)
    double warm_seconds = 0, comm_seconds = 0;
    // The fastest timed step: on a shared machine, the step least disturbed by neighbours.
    double fastest_step = 1e30;
    uint64_t comm_bytes = 0;
    fp8lm::Trainer trainer(c);
    trainer.set_cuda_graphs(!no_cuda_graphs);
    // The last step is profiled (kernels/op_times.h): its time by kind of op (on a GPU the
    // device's, the rest of its wall time the device's idle; on a CPU the backend's entry
    // points', the rest the host's own work), and on a GPU the FP8 GEMM operands the backend
    // had to transpose or pad (none where Linear hands them over K-major).
    std::string op_seconds = "null", operand_copies = "null";
    // On a GPU steps are launched without waiting and read in groups, as `fp8lm train` does
    // (issue 34); the step ending the warmup and the profiled one are read as they end.
    const auto take = [&](const std::vector<fp8lm::StepStats>& read, bool profiled,
                          int64_t copies_before) {
      for (const fp8lm::StepStats& s : read) {
        if (profiled) {
          op_seconds = op_seconds_json(fp8lm::take_op_times(), s.step_seconds);
          operand_copies = std::to_string(fp8lm::cuda::fp8_operand_copies() - copies_before);
        }
        if (s.step == warmup_steps) {
          warm_seconds = s.seconds;
          fp8lm::cpu::reset_gemm_stats();
          fp8lm::reset_traffic();
        }
        if (s.step > warmup_steps) {
          fastest_step = std::min(fastest_step, s.step_seconds);
          comm_seconds += s.comm_seconds;
          comm_bytes += s.comm_bytes;
        }
        if (dev.cuda && s.step == s.total) gpu_bytes = fp8lm::cuda::memory_used_bytes(dev.index);
      }
    };
    while (!trainer.done()) {
      const int64_t step = trainer.steps_done() + 1;
      const bool profiled = step == c.steps;
      if (profiled) take(trainer.read_steps(), false, 0);  // alone in its read
      fp8lm::profile_ops(profiled);
      const int64_t copies_before = fp8lm::cuda::fp8_operand_copies();
      trainer.launch_step();
      if (trainer.read_due(fp8lm::RunSchedule{}.steps_between_reads) || profiled ||
          step == warmup_steps)
        take(trainer.read_steps(), profiled, copies_before);
      fp8lm::profile_ops(false);
    }
    // Host figures (CPU runs only), taken before finish() makes every rank's model whole again.
    const std::string memory =
        dev.cuda ? std::string("null") : memory_json(trainer.model(), trainer.optimizer());
    const bool decided = trainer.decided_on_backend();  // steps as CUDA graphs, on a GPU
    const fp8lm::TrainResult r = trainer.finish();
    const fp8lm::cpu::GemmStats gemm = fp8lm::cpu::gemm_stats();
    const double timed = r.seconds - warm_seconds;
    const int64_t timed_steps = c.steps - warmup_steps;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    float peak_rss[] = {static_cast<float>(usage.ru_maxrss)};  // the largest rank's
    fp8lm::world().all_reduce_max(peak_rss, "peak RSS max-reduce");
    if (fp8lm::world().rank() != 0) return 0;
    const auto per_step = [&](double x) { return x / static_cast<double>(timed_steps); };
    fmt::print(
        R"({{"precision": "{}", "recipe": "{}", "tokens_per_s": {:.1f}, "seconds_per_step": {:.4f}, "fastest_step_seconds": {:.4f}, "peak_rss_mb": {:.1f}, "parameters": {}, "gemm_seconds_per_step": {:.4f}, "gemm_gflop_per_step": {:.3f}, "gemm_engine": "{}", "fusion": {}, "traffic_mb_per_step": {:.1f}, "memory_mb": {}, "device": "{}", "peak_gpu_mb": {:.0f}, "world_size": {}, "comm_seconds_per_step": {:.5f}, "comm_bytes_per_step": {:.0f}, "last_step_op_seconds": {}, "last_step_fp8_operand_copies": {}, "cuda_graphs": {}}})"
        "\n",
        r.precision.label(), recipe,
        static_cast<double>(timed_steps * c.batch_size * c.model.seq_len) / timed,
        timed / static_cast<double>(timed_steps), fastest_step,
        static_cast<double>(peak_rss[0]) / 1024.0, c.model.parameter_count(),
        gemm.seconds / static_cast<double>(timed_steps),
        gemm.flops / 1e9 / static_cast<double>(timed_steps),
        fp8lm::cpu::engine_name(fp8lm::cpu::low_precision_engine()), c.fusion ? "true" : "false",
        static_cast<double>(fp8lm::traffic_bytes()) / 1e6 / static_cast<double>(timed_steps),
        memory, dev.name, static_cast<double>(gpu_bytes) / (1 << 20), fp8lm::world().size(),
        per_step(comm_seconds), per_step(static_cast<double>(comm_bytes)), op_seconds,
        operand_copies, dev.cuda && !no_cuda_graphs && decided ? "true" : "false");
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
