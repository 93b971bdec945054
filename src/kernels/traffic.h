#pragma once
// The bytes kernels read and write, for the benchmark's traffic column (what fusion saves).
// Nominal: every operand counted once per call, by the kernel entries and their callers.
#include <cstdint>

namespace fp8lm {

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
