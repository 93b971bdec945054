#pragma once
// Where a command runs: `--device auto|cpu|cuda[:N]` (docs/reference/numerics.md, precision
// policy). auto picks GPU 0 when this build has the CUDA backend and the process sees a GPU,
// else the CPU, and says why.
#include <string>
#include <string_view>

#include "core/precision.h"
#include "fp8lm/train_config.h"  // DeviceSpec
#include "kernels/backend.h"
#include "kernels/cuda/device_query.h"

namespace fp8lm {

// Throws Error naming the flag for anything but auto, cpu, cuda or cuda:N.
DeviceSpec parse_device(std::string_view text);

struct DeviceChoice {
  bool cuda = false;
  int index = 0;
  std::string name;  // "cpu" or "cuda:0 NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  std::string reason;  // auto: why this device
  std::string label() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

// The GPU a data-parallel rank takes (issue 13): its local rank's (modulo the GPUs visible)
// when the spec names none (auto, cuda); an explicit cuda:N or cpu as it is.
DeviceSpec gpu_of_local_rank(DeviceSpec spec, int local_rank, int gpus);

// Resolves auto; an explicit cuda request without a usable GPU throws Error with the reason
// (not built, no device, index out of range), never a silent fallback to the CPU.
DeviceChoice resolve_device(const DeviceSpec& spec);

// What the machine offers fp8lm's kernels, for `fp8lm doctor`: the CPU paths chosen at run
// time, and the CUDA devices this build can see.
struct CpuKernelInfo {
  std::string quantize_isa;                  // the FP8 quantize kernels' instruction set
  double fma_gflops = 0, dpbf16_gflops = 0;  // one core's measured throughput (0: no probe)
  std::string gemm_engine;                   // how BF16/FP8 GEMMs run
  std::string gemm_implementation;           // oneDNN's kernels behind it
  std::string attention_bf16_products;       // cpu/attention.h's attention_bf16_products()
};
CpuKernelInfo cpu_kernel_info();
inline cuda::DeviceQuery cuda_devices() {
  return cuda::query_devices();
}

// The backend that runs on the chosen device.
Backend& backend_for(const DeviceChoice& device);

// The precision policy for the chosen device (resolve_cpu_precision / resolve_cuda_precision).
PrecisionChoice resolve_precision(Precision requested, const DeviceChoice& device);

}  // namespace fp8lm
