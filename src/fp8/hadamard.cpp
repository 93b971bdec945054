#include "fp8/hadamard.h"

#include <algorithm>
#include <vector>

#include "core/grown.h"
#include "fp8/quantize.h"
#include "fp8/quantize_isa.h"

namespace fp8lm {

void rht16_rows_reference(float* y, const float* x, int64_t rows, int64_t cols) {
  for (int64_t g = 0; g < rows; g += kRhtSize) {
    for (int64_t c = 0; c < cols; ++c) {
      float v[kRhtSize];
      for (int64_t i = 0; i < kRhtSize; ++i) v[i] = x[(g + i) * cols + c] * kRhtSigns[i];
      for (int64_t h = 1; h < kRhtSize; h *= 2)
        for (int64_t i = 0; i < kRhtSize; i += 2 * h)
          for (int64_t j = i; j < i + h; ++j) {
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
          }
      for (int64_t i = 0; i < kRhtSize; ++i) y[(g + i) * cols + c] = v[i] * 0.25f;
    }
  }
}

void rht16_rows(float* y, const float* x, int64_t rows, int64_t cols) {
  // Where the CPU has the registers, each group's rows stay in them (no pass per stage).
  if (best_isa() != Isa::Scalar) return isa::rht16_rows_avx2(y, x, rows, cols);
  // The same operations, each applied to a whole row of the group at once, in y.
  for (int64_t g = 0; g < rows; g += kRhtSize) {
    float* out = y + g * cols;
    for (int64_t i = 0; i < kRhtSize; ++i) {
      const float* in = x + (g + i) * cols;
      float* o = out + i * cols;
      const float s = kRhtSigns[static_cast<size_t>(i)];
      for (int64_t c = 0; c < cols; ++c) o[c] = in[c] * s;
    }
    for (int64_t h = 1; h < kRhtSize; h *= 2)
      for (int64_t i = 0; i < kRhtSize; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          // Rows j and j + h never overlap: the compiler may vectorize without a runtime check.
          float* __restrict a = out + j * cols;
          float* __restrict b = out + (j + h) * cols;
          for (int64_t c = 0; c < cols; ++c) {
            const float u = a[c], w = b[c];
            a[c] = u + w;
            b[c] = u - w;
          }
        }
    std::for_each(out, out + kRhtSize * cols, [](float& v) { v *= 0.25f; });
  }
}

float rht16_absmax(const float* x, int64_t rows, int64_t cols, float* plain_amax) {
  if (best_isa() == Isa::Avx512) return isa::rht16_absmax_avx512(x, rows, cols, plain_amax);
  if (plain_amax) *plain_amax = absmax(x, rows * cols);
  if (best_isa() == Isa::Avx2) return isa::rht16_absmax_avx2(x, rows, cols);
  thread_local std::vector<float> storage;
  float* y = grown(storage, static_cast<size_t>(rows * cols));
  rht16_rows(y, x, rows, cols);
  return absmax(y, rows * cols);
}

}  // namespace fp8lm
