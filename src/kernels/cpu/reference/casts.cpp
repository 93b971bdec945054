#include "kernels/cpu/casts.h"

namespace fp8lm::cpu::ref {

void bf16_to_f32(float* y, const bf16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

void fp8_to_f32(float* y, const uint8_t* codes, int64_t n, DType f) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp8_decode(codes[i], f);
}

}  // namespace fp8lm::cpu::ref
