#pragma once
// The CUDA devices this process can see. Built as a CUDA translation unit when FP8LM_CUDA is
// on, and as a stub saying "not built" otherwise; without a GPU or driver it finds none.
#include <cstddef>
#include <string>
#include <vector>

namespace fp8lm {
class Backend;
}

namespace fp8lm::cuda {

struct Device {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t memory_bytes = 0;
  // Which physical GPU it is on this machine ("0000:17:00"), whatever CUDA_VISIBLE_DEVICES
  // numbers it: NCCL takes one rank per GPU.
  std::string pci_address;
};

struct DeviceQuery {
  bool built = false;   // fp8lm was compiled with the CUDA backend
  std::string runtime;  // CUDA runtime version, e.g. "13.0"
  std::vector<Device> devices;
  std::string why_none;  // when devices is empty: the reason, in words
  // An NVIDIA driver answered (with or without GPUs): a CPU run then says it found none.
  bool driver = false;
};

DeviceQuery query_devices();

// Bytes of the device's memory in use (by every process), 0 without CUDA.
size_t memory_used_bytes(int device);

// The backend of CUDA device `device` (kernels/backend.h), one per device for the process;
// Error when fp8lm was built without the CUDA backend.
Backend& backend(int device);

}  // namespace fp8lm::cuda
