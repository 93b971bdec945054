#pragma once
// What cuBLASLt accepts on an sm_90 device, from NVIDIA's documentation of cublasLtMatmul
// (its data-type tables, the FP8 requirements and Tensor Core Usage) and of the attributes in
// cublasLt.h. The heuristic offers no algorithm for anything else, and cublasLtMatmul refuses
// it, with the status the library documents.
#include <cstdint>
#include <string>

#include "cublaslt_objects.h"

namespace emu::detail {

// One matmul problem as the descriptor and layouts describe it: D = alpha op(A) op(B) + beta C.
struct LtShape {
  int64_t m = 0, n = 0, k = 0;
  bool fp8 = false;
};

struct LtVerdict {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string why;  // for the diagnostic line when status is not success
  LtShape shape;
};

// Checks the descriptor and layouts (not the pointers): sizes and leading dimensions
// (CUBLAS_STATUS_INVALID_VALUE), then types, transposes, epilogue and FP8 rules
// (CUBLAS_STATUS_NOT_SUPPORTED).
LtVerdict check_problem(const cublasLtMatmulDescOpaque_t& desc,
                        const cublasLtMatrixLayoutOpaque_t& a,
                        const cublasLtMatrixLayoutOpaque_t& b,
                        const cublasLtMatrixLayoutOpaque_t& c,
                        const cublasLtMatrixLayoutOpaque_t& d);

// The bias type the problem uses: the one set, or the library's default.
cudaDataType_t effective_bias_type(const cublasLtMatmulDescOpaque_t& desc,
                                   const cublasLtMatrixLayoutOpaque_t& d, bool fp8);

// The smallest alignment in bytes the problem's kernels need of A, B, C and D.
uint32_t required_alignment(const cublasLtMatrixLayoutOpaque_t& layout, bool fp8);

}  // namespace emu::detail
