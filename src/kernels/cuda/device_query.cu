#include <cuda_runtime.h>
#include <cstdio>

#include "kernels/cuda/device_query.h"

namespace fp8lm::cuda {

DeviceQuery query_devices() {
  DeviceQuery q;
  q.built = true;
  int version = 0;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) {
    q.runtime = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  q.driver = err == cudaSuccess || err == cudaErrorNoDevice;
  if (err != cudaSuccess) {
    q.why_none = err == cudaErrorNoDevice
                     ? "no NVIDIA GPU found"
                     : std::string("no NVIDIA driver found (") + cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return q;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char pci[32];
    std::snprintf(pci, sizeof pci, "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID,
                  prop.pciDeviceID);
    q.devices.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem, pci});
  }
  if (q.devices.empty()) q.why_none = "no NVIDIA GPU found";
  return q;
}

size_t memory_used_bytes(int device) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return 0;
  size_t free = 0, total = 0;
  const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(previous);
  return ok ? total - free : 0;
}

}  // namespace fp8lm::cuda
