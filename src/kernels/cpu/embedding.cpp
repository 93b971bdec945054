#include "kernels/cpu/embedding.h"
#include "kernels/cpu/row_reduce.h"

#include <algorithm>

namespace fp8lm::cpu {
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static) if (B * T * C >= kParallelMin)
  for (int64_t p = 0; p < B * T; ++p) {
    const float* tok = wte + static_cast<int64_t>(tokens[p]) * C;
    float* o = out + p * C;
    if (!wpe) {
      std::copy_n(tok, C, o);
      continue;
    }
    const float* pos = wpe + (p % T) * C;
    for (int64_t c = 0; c < C; ++c) o[c] = tok[c] + pos[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  // Repeated tokens make rows of dwte collide, so threads split the columns instead: each owns
  // a block of 16 (one cache line) and walks every position in order. Each element's sum thus
  // has the same bits as a serial loop, for any thread count, without atomics.
  constexpr int64_t kCols = 16;
  const int64_t blocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (B * T * C >= kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kCols, width = std::min(kCols, C - c0);
    for (int64_t p = 0; p < B * T; ++p) {
      const float* g = dout + p * C + c0;
      float* tok = dwte + static_cast<int64_t>(tokens[p]) * C + c0;
      for (int64_t j = 0; j < width; ++j) tok[j] += g[j];
      if (!dwpe) continue;
      float* pos = dwpe + (p % T) * C + c0;
      for (int64_t j = 0; j < width; ++j) pos[j] += g[j];
    }
  }
}

}  // namespace fp8lm::cpu
