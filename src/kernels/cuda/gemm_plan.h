#pragma once
// cuBLASLt underneath gemm.h: one handle per device, and per thread a cache of matmul plans
// (descriptors, layouts, chosen algorithm) keyed by everything the heuristic looks at. Speaks
// cuBLASLt's column-major language; gemm.cu translates the row-major calls into it.
#include <cublasLt.h>

#include <cstdint>

#include "fp8lm/error.h"

namespace fp8lm::cuda {

[[noreturn]] void throw_cublas_error(const char* what, cublasStatus_t status, const char* file,
                                     int line);

}  // namespace fp8lm::cuda

#define FP8LM_CUBLAS_CHECK(call)                                                   \
  do {                                                                             \
    const cublasStatus_t fp8lm_status_ = (call);                                   \
    if (fp8lm_status_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::fp8lm::cuda::throw_cublas_error(#call, fp8lm_status_, __FILE__, __LINE__); \
  } while (0)

namespace fp8lm::cuda {

// One cublasLtMatmul problem, column-major: D[m, n] = alpha * op(A) op(B) + beta * C,
// D = C in place. a/b are the stored matrices before op (rows x cols, leading dimension ld).
struct LtProblem {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t atype = CUDA_R_32F, btype = CUDA_R_32F, ctype = CUDA_R_32F;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;  // elements
  bool fp8 = false;  // A and B are FP8: their scale pointers are set
  // FP8: how cuBLASLt reads each scale pointer (cublasLtMatmulMatrixScale_t): 0 one FP32 scale
  // for the matrix; Hopper's block modes, VEC128_32F and BLK128x128_32F, in block_gemm.h.
  int32_t scale_mode_a = 0, scale_mode_b = 0;
  bool alpha_nonzero = true, beta_nonzero = false;
};

// The operands of one call. The pointers' alignments (and the strides') are part of the plan's
// key, as the heuristic picks kernels by them.
struct LtOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const float* scale_a = nullptr;  // FP8: device dequantization factor of A (nullptr: 1)
  const float* scale_b = nullptr;
};

struct LtPlan;

// The cached plan for this problem and these operands' alignments on the current device.
// Throws an Error naming the problem when cuBLASLt offers no algorithm.
LtPlan& lt_plan(const LtProblem& p, const LtOperands& ops);
// The same, or nullptr when cuBLASLt offers no algorithm (the answer is cached too): for a
// caller with another way to form the product.
LtPlan* lt_plan_if_any(const LtProblem& p, const LtOperands& ops);

// Runs the plan on the operands (with the stream's own workspace).
void lt_run(LtPlan& plan, const LtOperands& ops, float alpha, float beta, cudaStream_t stream);

// Compute capability of the current device as 10 * major + minor.
int current_device_cc();

// Bytes of the cuBLASLt workspace per stream for a device of this compute capability.
size_t lt_workspace_bytes(int cc);

}  // namespace fp8lm::cuda
