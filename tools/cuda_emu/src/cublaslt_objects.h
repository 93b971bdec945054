#pragma once
// The cuBLASLt objects behind the opaque handles: what each attribute was set to, with the
// library's defaults.
#include <cstdint>

#include "cublasLt.h"

struct cublasLtContext {
  int device = 0;
};

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = 0;  // host alpha and beta
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: the library's default for the problem
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const void* c_scale = nullptr;
  const void* d_scale = nullptr;
  void* amax_d = nullptr;
  int8_t fast_accum = 0;
  int32_t a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;  // elements between the matrices of a batch
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
  // The alignments the caller promises (the default: 256 bytes, cuBLASLt's assumption).
  uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;
};

namespace emu::detail {

// Whether h is a live object from the matching create call (a destroyed one is not).
bool is_live(const void* h);

// The bytes of one element of t (0 for types the emulator does not know).
int element_bytes(cudaDataType_t t);

}  // namespace emu::detail
