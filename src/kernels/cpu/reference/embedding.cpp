// The embedding oracle: plain loops, double accumulation, no threads, no intrinsics.
#include <cstddef>
#include <map>
#include <vector>

#include "kernels/cpu/embedding.h"

namespace fp8lm::cpu::ref {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t token = tokens[b * T + t];
      for (int64_t c = 0; c < C; ++c)
        out[(b * T + t) * C + c] = static_cast<float>(static_cast<double>(wte[token * C + c]) +
                                                      (wpe ? wpe[t * C + c] : 0));
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  // Sums per token and per position in double, then one rounding into each gradient.
  std::map<int32_t, std::vector<double>> by_token;
  std::vector<double> by_position(static_cast<size_t>(T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      auto& acc = by_token[tokens[b * T + t]];
      acc.resize(static_cast<size_t>(C), 0.0);
      for (int64_t c = 0; c < C; ++c) {
        acc[c] += dout[(b * T + t) * C + c];
        by_position[t * C + c] += dout[(b * T + t) * C + c];
      }
    }
  }
  for (const auto& [token, acc] : by_token)
    for (int64_t c = 0; c < C; ++c)
      dwte[token * C + c] = static_cast<float>(dwte[token * C + c] + acc[c]);
  if (!dwpe) return;
  for (int64_t i = 0; i < T * C; ++i) dwpe[i] = static_cast<float>(dwpe[i] + by_position[i]);
}

}  // namespace fp8lm::cpu::ref
