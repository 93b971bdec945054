// fp8lm doctor: what this machine offers fp8lm, and what --precision auto will pick.
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/precision.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "kernels/backend.h"
#include "kernels/device.h"

namespace fp8lm::cli {
namespace {

const char* yes_no(bool b) {
  return b ? "yes" : "no";
}

void run_doctor() {
  const CpuFeatures& cpu = cpu_features();
  fmt::print("fp8lm {}\n", FP8LM_VERSION);
  fmt::print("cpu: {}\n", cpu.model);
  fmt::print("  avx2 {} · avx512 {} · avx512_bf16 {} · amx_bf16 {}\n", yes_no(cpu.avx2),
             yes_no(cpu.avx512), yes_no(cpu.avx512_bf16), yes_no(cpu.amx_bf16));
  if (!cpu.capped.empty())
    fmt::print("  (capped by FP8LM_MAX_ISA={}: the wider instructions read as absent)\n",
               cpu.capped);
  const CpuKernelInfo k = cpu_kernel_info();
  fmt::print("  fp8 quantize kernels: {}\n", k.quantize_isa);
  if (k.fma_gflops > 0) {
    fmt::print("  one core: vfmadd231ps {:.0f} GFLOP/s · vdpbf16ps {:.0f} GFLOP/s\n", k.fma_gflops,
               k.dpbf16_gflops);
  }
  fmt::print("  bf16/fp8 GEMM engine: {} (oneDNN {})\n", k.gemm_engine, k.gemm_implementation);
  fmt::print("  bf16 attention products: {}\n", k.attention_bf16_products);

  const cuda::DeviceQuery q = cuda_devices();
  if (!q.built) {
    fmt::print("cuda: not built\n");
  } else if (q.devices.empty()) {
    fmt::print("cuda: built (runtime {}) · {}\n", q.runtime, q.why_none);
  } else {
    fmt::print("cuda: built (runtime {})\n", q.runtime);
    for (const auto& d : q.devices) {
      fmt::print("  cuda:{} {} · compute capability {}.{} · {:.1f} GiB\n", d.index, d.name,
                 d.cc_major, d.cc_minor, static_cast<double>(d.memory_bytes) / (1 << 30));
      // Issue 14: where --recipe block's GEMMs run on the block-scaled tensor cores.
      fmt::print("    recipe block GEMMs: {}\n",
                 cuda::backend(d.index).block_scaled_gemms(BlockScheme::Fp8Block)
                     ? "native (cuBLASLt VEC128/BLK128x128 block scaling)"
                     : "emulated (BF16 GEMMs of the decoded operands; native needs cc 9.0 and "
                       "cuBLAS 12.9)");
    }
  }

  // Data parallelism: whether this build has MPI, and how this process was launched.
  const Launch launch = detect_launch();
  fmt::print("mpi: {}{}\n",
             mpi_built() ? fmt::format("built ({})", mpi_library_version())
                         : "not built (one process only; install libopenmpi-dev and build again)",
             launch.launcher.empty() ? ""
                                     : fmt::format(" · launched as rank {} of {} by {}",
                                                   launch.rank, launch.size, launch.launcher));
  fmt::print("nccl: {}\n", nccl_built() ? fmt::format("built ({}): GPU ranks reduce on their GPUs",
                                                      nccl_version())
                                        : "not built (GPU ranks reduce through host memory)");

  const PrecisionChoice c = resolve_cpu_precision(Precision::Auto, cpu);
  fmt::print("precision auto -> {} on cpu ({})\n", c.label(), c.reason);
  for (const auto& d : q.devices) {
    const PrecisionChoice g = resolve_cuda_precision(Precision::Auto, d.cc_major, d.cc_minor);
    fmt::print("precision auto -> {} on cuda:{} ({})\n", g.label(), d.index, g.reason);
  }
  const DeviceChoice dev = resolve_device({DeviceSpec::Auto, 0});
  fmt::print("device auto -> {}{}\n", dev.name, dev.reason.empty() ? "" : " (" + dev.reason + ")");
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  app.add_subcommand("doctor", "Show the CPU, GPUs and the precision --precision auto picks")
      ->callback([] {
        if (!parse_only()) run_doctor();
      });
}

}  // namespace fp8lm::cli
