#include "kernels/cpu/gemm.h"

namespace fp8lm::cpu::ref {

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta == Trans::N ? A[m * K + k] : A[k * M + m];
        const double b = tb == Trans::N ? B[k * N + n] : B[n * K + k];
        acc += a * b;
      }
      const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * C[m * N + n];
      C[m * N + n] = static_cast<float>(alpha * acc + prior);
    }
  }
}

}  // namespace fp8lm::cpu::ref
