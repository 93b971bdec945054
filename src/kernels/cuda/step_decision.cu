// One block looks at every row loss (a step's rows are at most a few hundred thousand, read
// once); the copy is a grid-stride loop over bytes, as its buffers are small (a store's scaling
// state) and of any alignment.
#include <cuda_runtime.h>

#include "kernels/adamw_ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/step_decision.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 1024;

struct And {
  __device__ int operator()(int a, int b) const { return a & b; }
};

__global__ void decide_kernel(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                              const float* bias_corrections) {
  int finite = 1;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) finite &= adamw::finite(losses[r]);
  finite = block_allreduce(finite, And{}, 1);
  if (threadIdx.x != 0) return;
  if (norm != nullptr) finite &= adamw::finite(*norm);
  adamw::decide(*d, finite != 0, bias_corrections);
}

__global__ void copy_if_kernel(unsigned char* dst, const unsigned char* src, size_t bytes,
                               const int32_t* flag) {
  if (*flag == 0) return;
  for (int64_t i = global_thread(); i < static_cast<int64_t>(bytes); i += grid_threads())
    dst[i] = src[i];
}

}  // namespace

void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                 const float* bias_corrections, cudaStream_t stream) {
  decide_kernel<<<1, kThreads, 0, stream>>>(d, losses, rows, norm, bias_corrections);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void copy_if(void* dst, const void* src, size_t bytes, const int32_t* flag, cudaStream_t stream) {
  if (bytes == 0) return;
  const unsigned blocks = grid_stride_blocks(static_cast<int64_t>(bytes), 256, 1024);
  copy_if_kernel<<<blocks, 256, 0, stream>>>(static_cast<unsigned char*>(dst),
                                             static_cast<const unsigned char*>(src), bytes, flag);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
