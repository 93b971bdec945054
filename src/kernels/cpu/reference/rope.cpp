// The oracle for rope: one position, one pair at a time, the rotation in double.
#include <cmath>

#include "kernels/cpu/rope.h"

namespace fp8lm::cpu::ref {

void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
          int64_t hd, float theta, bool inverse) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* head = x + r * stride + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos0 + r % T) * rope_frequency(i, hd, theta);
        const double c = static_cast<float>(std::cos(static_cast<double>(angle)));
        const double s =
            static_cast<float>(std::sin(static_cast<double>(angle))) * (inverse ? -1 : 1);
        const double a = head[i], b = head[i + half];
        head[i] = static_cast<float>(a * c - b * s);
        head[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

}  // namespace fp8lm::cpu::ref
