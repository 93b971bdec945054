#pragma once
// Whether modules run their fused kernels (the default) or the unfused twins: LayerNorm then a
// separate FP8 cast, bias then activation then cast, residual add then LayerNorm, softmax then
// a separate cross-entropy pass, one AdamW pass per parameter. `--no-fusion` measures what
// fusion is worth; both paths compute the same values (tests train with each).
//
// Each path also counts the bytes its kernels read and write (nominal: every operand once),
// so the benchmark can show the traffic fusion saves.
#include <cstdint>

#include "core/scoped_value.h"

namespace fp8lm {

bool fusion_enabled();

class FusionScope : ScopedValue<bool> {
 public:
  explicit FusionScope(bool enabled);
};

// The byte counter: kernels' callers add what a call reads and writes.
void count_traffic(int64_t bytes);
// What C[M,N] (+)= A[M,K]·B[K,N] moves with a_bytes / b_bytes per operand element and an FP32
// C (read too when accumulating).
inline int64_t gemm_traffic(int64_t M, int64_t N, int64_t K, int a_bytes, int b_bytes,
                            bool accumulate) {
  return M * K * a_bytes + K * N * b_bytes + M * N * 4 * (accumulate ? 2 : 1);
}
int64_t traffic_bytes();
void reset_traffic();

}  // namespace fp8lm
