// The positions' cos and sin tabled once per call, then every head of every row turned by
// them; rows are independent, so threads split them with nothing shared.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace fp8lm::cpu {

float rope_frequency(int64_t i, int64_t hd, float theta) {
  return static_cast<float>(1.0 / std::pow(static_cast<double>(theta),
                                           static_cast<double>(2 * i) / static_cast<double>(hd)));
}

void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
          int64_t hd, float theta, bool inverse) {
  const int64_t half = hd / 2, positions = rows < T ? rows : T;
  std::vector<float> cos_table(static_cast<size_t>(positions * half)), sin_table(cos_table.size());
  std::vector<float> frequency(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) frequency[i] = rope_frequency(i, hd, theta);
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos0 + p) * frequency[i];
      cos_table[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      sin_table[p * half + i] = inverse ? -s : s;
    }
  }
#pragma omp parallel for schedule(static) if (rows * heads * hd >= (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos_table.data() + (r % T) * half;
    const float* s = sin_table.data() + (r % T) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* lo = x + r * stride + h * hd;
      float* hi = lo + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace fp8lm::cpu
