#pragma once
// The arithmetic behind the emulated cublasLtMatmul: D = scale * op(A) op(B) + beta C + bias,
// column-major, each product summed in double over k and rounded once to D's type. Under FP8
// block scaling, the sum over each 128 values of k (exact in double) is multiplied by that
// block's A and B scales before it joins the total.
#include <cstdint>

#include "library_types.h"

namespace emu::detail {

struct GemmMatrix {
  const void* data = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t ld = 0;
  int64_t stride = 0;  // elements between batch entries
};

// An operand's FP8 block scales (cublaslt_rules.h's layouts); mode 0: none.
struct BlockScales {
  int32_t mode = 0;
  const float* scales = nullptr;
};

struct GemmCall {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;
  GemmMatrix a, b, c;
  void* d = nullptr;           // D has C's type, ld and stride
  double alpha = 1.0;          // including FP8 scales
  double beta = 0.0;           // C is not read when 0
  const void* bias = nullptr;  // length m, broadcast over columns and batches
  cudaDataType_t bias_type = CUDA_R_32F;
  BlockScales a_blocks, b_blocks;  // block-scaled FP8: each 128-long run of K's partial sum
                                   // times its A and B scales
};

void reference_gemm(const GemmCall& call);

}  // namespace emu::detail
