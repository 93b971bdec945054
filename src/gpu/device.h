#pragma once
// Where a command runs: `--device auto|cpu|cuda[:N]` (DESIGN.md §4). auto picks GPU 0 when this
// build has the CUDA backend and the process sees a GPU, else the CPU, and says why.
#include <string>
#include <string_view>

#include "core/precision.h"

namespace fp8lm {

struct DeviceSpec {
  enum Kind { Auto, Cpu, Cuda } kind = Auto;
  int index = 0;  // cuda:N
};

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

// Resolves auto; an explicit cuda request without a usable GPU throws Error with the reason
// (not built, no device, index out of range), never a silent fallback to the CPU.
DeviceChoice resolve_device(const DeviceSpec& spec);

// The precision policy for the chosen device (resolve_cpu_precision / resolve_cuda_precision).
PrecisionChoice resolve_precision(Precision requested, const DeviceChoice& device);

}  // namespace fp8lm
