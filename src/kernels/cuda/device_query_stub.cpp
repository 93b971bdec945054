// Used when fp8lm is built without the CUDA backend (FP8LM_CUDA=OFF or no nvcc).
#include "kernels/cuda/device_query.h"
#include "kernels/cuda/op_times.h"

#include "fp8lm/error.h"

namespace fp8lm::cuda {

DeviceQuery query_devices() {
  return {false, "", {}, "CUDA support not built", false};
}

size_t memory_used_bytes(int) {
  return 0;
}

int64_t fp8_operand_copies() {
  return 0;
}

Backend& backend(int) {
  throw Error("--device cuda: fp8lm was built without the CUDA backend");
}

}  // namespace fp8lm::cuda
