// The GEMM entry over operand descriptors: one dispatch on the operands' dtypes.
#include <fmt/format.h>

#include "fp8lm/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/traffic.h"

namespace fp8lm::cpu {

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A,
          const GemmOperand& B, float beta, float* C, const float* bias) {
  // An FP8 operand whose decoded BF16 values came with it is read as those.
  const auto bytes = [](const GemmOperand& o) {
    return static_cast<int>(o.decoded ? sizeof(bf16_t) : dtype_size(o.type));
  };
  count_traffic(gemm_traffic(M, N, K, bytes(A), bytes(B), beta != 0.0f));
  if (A.type == DType::F32 && B.type == DType::F32) {
    return gemm_f32(ta, tb, M, N, K, alpha, static_cast<const float*>(A.data),
                    static_cast<const float*>(B.data), beta, C, bias);
  }
  if (A.type == DType::BF16 && B.type == DType::BF16) {
    // A block-scaled operand's tensor scale (fp8/block_cast.h) applies to the output.
    if (A.scale_inv) alpha *= *A.scale_inv;
    if (B.scale_inv) alpha *= *B.scale_inv;
    return gemm_bf16(ta, tb, M, N, K, alpha, static_cast<const bf16_t*>(A.data),
                     static_cast<const bf16_t*>(B.data), beta, C, bias);
  }
  if (is_fp8(A.type) && is_fp8(B.type) && A.scale_inv && B.scale_inv) {
    return gemm_fp8(
        ta, tb, M, N, K, alpha * *A.scale_inv * *B.scale_inv, static_cast<const uint8_t*>(A.data),
        A.type, static_cast<const uint8_t*>(B.data), B.type, beta, C, A.decoded, B.decoded, bias);
  }
  throw Error(
      fmt::format("cpu::gemm: operands {} and {} do not mix (both F32, both BF16, or "
                  "both FP8 with their scale_invs)",
                  dtype_name(A.type), dtype_name(B.type)));
}

}  // namespace fp8lm::cpu
