#include "kernels/device.h"

#include <fmt/format.h>

#include <charconv>

#include "fp8/quantize.h"
#include "fp8lm/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bf16_probe.h"
#include "kernels/cpu/gemm.h"

namespace fp8lm {

DeviceSpec parse_device(std::string_view text) {
  if (text == "auto") return {DeviceSpec::Auto, 0, true};
  if (text == "cpu") return {DeviceSpec::Cpu, 0};
  if (text == "cuda") return {DeviceSpec::Cuda, 0, true};
  if (text.starts_with("cuda:")) {
    const std::string_view n = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && !n.empty() && index >= 0) {
      return {DeviceSpec::Cuda, index};
    }
  }
  throw Error(fmt::format("--device '{}' is not one of auto, cpu, cuda, cuda:N", text));
}

DeviceSpec gpu_of_local_rank(DeviceSpec spec, int local_rank, int gpus) {
  if (spec.kind != DeviceSpec::Cpu && spec.any_gpu && gpus > 0) spec.index = local_rank % gpus;
  return spec;
}

DeviceChoice resolve_device(const DeviceSpec& spec) {
  DeviceChoice cpu_choice{false, 0, "cpu", 0, 0, ""};
  if (spec.kind == DeviceSpec::Cpu) return cpu_choice;
  const cuda::DeviceQuery q = cuda::query_devices();
  if (spec.kind == DeviceSpec::Auto && q.devices.empty()) {
    // Said only where a GPU could have been expected: a driver is there, but no GPU.
    if (q.driver) cpu_choice.reason = q.why_none;
    return cpu_choice;
  }
  if (!q.built) throw Error("--device cuda: fp8lm was built without the CUDA backend");
  if (q.devices.empty()) throw Error(fmt::format("--device cuda: {}", q.why_none));
  if (spec.index >= static_cast<int>(q.devices.size())) {
    throw Error(fmt::format("--device cuda:{}: only {} CUDA device(s) visible", spec.index,
                            q.devices.size()));
  }
  const cuda::Device& d = q.devices[static_cast<size_t>(spec.index)];
  return {true,       d.index,    fmt::format("cuda:{} {}", d.index, d.name),
          d.cc_major, d.cc_minor, spec.kind == DeviceSpec::Auto ? "a CUDA device is present" : ""};
}

Backend& backend_for(const DeviceChoice& device) {
  return device.cuda ? cuda::backend(device.index) : cpu_backend();
}

PrecisionChoice resolve_precision(Precision requested, const DeviceChoice& device) {
  if (device.cuda) return resolve_cuda_precision(requested, device.cc_major, device.cc_minor);
  return resolve_cpu_precision(requested, cpu_features());
}

CpuKernelInfo cpu_kernel_info() {
  const cpu::Bf16Throughput& t = cpu::bf16_throughput();
  return {std::string(isa_name(best_isa())),
          t.fma_gflops,
          t.dpbf16_gflops,
          std::string(cpu::engine_name(cpu::low_precision_engine())),
          cpu::engine_implementation(),
          std::string(cpu::attention_bf16_products())};
}

}  // namespace fp8lm
