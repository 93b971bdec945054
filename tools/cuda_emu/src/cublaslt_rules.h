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
  bool block_scaled = false;  // A and B scaled per 128 values of K (VEC128) or 128x128 block
};

// The FP32 scales an FP8 block scale mode reads for an operand with `outer` rows (M for A, N
// for B) and K: VEC128_32F one per row and 128 values of K, stored outer x ceil(K/128) with the
// outer index contiguous; BLK128x128_32F one per 128x128 block, stored ceil(outer/128) x L4
// with the K-block index contiguous, L4 = ceil(K/128) rounded up to a multiple of 4 (cuBLAS
// documentation, "Scaling factors layouts"; docs/cublaslt-block-scaling.md).
int64_t block_scale_count(int32_t mode, int64_t outer, int64_t k);
// The scale of element (row `i` of the operand, `kk` along K) in that layout.
int64_t block_scale_index(int32_t mode, int64_t i, int64_t kk, int64_t outer, int64_t k);

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
