#include "kernels/cuda/cuda_check.h"

#include <fmt/format.h>

namespace fp8lm::cuda {

void throw_cuda_error(const char* what, const std::string& why, const char* file, int line) {
  throw Error(fmt::format("CUDA: {} failed: {} ({}:{})", what, why, file, line));
}

}  // namespace fp8lm::cuda
