// The RMSNorm oracle: plain loops, double accumulation, no threads, no intrinsics.
#include <cmath>
#include <vector>

#include "kernels/cpu/rmsnorm.h"

namespace fp8lm::cpu::ref {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int64_t rows,
                     int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = static_cast<float>(xr[c] * s * gamma[c]);
    rstd[r] = static_cast<float>(s);
  }
}

void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t rows, int64_t C) {
  std::vector<double> dg(static_cast<size_t>(C), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const double s = rstd[r];
    double gx_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = xr[c] * s;
      gx_sum += static_cast<double>(gamma[c]) * dyr[c] * xhat;
      dg[c] += dyr[c] * xhat;
    }
    const double gx_mean = gx_sum / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double g = static_cast<double>(gamma[c]) * dyr[c];
      dx[r * C + c] = static_cast<float>(dx[r * C + c] + s * (g - xr[c] * s * gx_mean));
    }
  }
  for (int64_t c = 0; c < C; ++c) dgamma[c] = static_cast<float>(dgamma[c] + dg[c]);
}

}  // namespace fp8lm::cpu::ref
