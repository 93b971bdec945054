#pragma once
// Every CUDA, cuBLASLt and cuDNN call goes through one of these: a failure becomes an Error
// naming the call and the library's reason, never a silent wrong result.
#include <cuda_runtime_api.h>

#include <string>

#include "fp8lm/error.h"

namespace fp8lm::cuda {

[[noreturn]] void throw_cuda_error(const char* what, const std::string& why, const char* file,
                                   int line);

}  // namespace fp8lm::cuda

#define FP8LM_CUDA_CHECK(call)                                                                    \
  do {                                                                                            \
    const cudaError_t fp8lm_err_ = (call);                                                        \
    if (fp8lm_err_ != cudaSuccess)                                                                \
      ::fp8lm::cuda::throw_cuda_error(#call, cudaGetErrorString(fp8lm_err_), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad launch configuration surfaces here, at the launch site.
#define FP8LM_CUDA_CHECK_LAUNCH() FP8LM_CUDA_CHECK(cudaGetLastError())
