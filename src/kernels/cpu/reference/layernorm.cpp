// The LayerNorm oracle: plain loops, double accumulation, no threads, no intrinsics.
#include <cmath>
#include <vector>

#include "kernels/cpu/layernorm.h"

namespace fp8lm::cpu::ref {

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += xr[c];
    const double m = sum / static_cast<double>(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= static_cast<double>(C);
    const double s = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = static_cast<float>((xr[c] - m) * s * gamma[c] + beta[c]);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(s);
  }
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C) {
  std::vector<double> dg(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const double m = mean[r], s = rstd[r];
    double g_sum = 0.0, gx_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (xr[c] - m) * s;
      const double g = static_cast<double>(gamma[c]) * dyr[c];
      g_sum += g;
      gx_sum += g * xhat;
      dg[c] += dyr[c] * xhat;
      db[c] += dyr[c];
    }
    const double g_mean = g_sum / static_cast<double>(C), gx_mean = gx_sum / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (xr[c] - m) * s;
      const double g = static_cast<double>(gamma[c]) * dyr[c];
      dx[r * C + c] = static_cast<float>(dx[r * C + c] + s * (g - g_mean - xhat * gx_mean));
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    dgamma[c] = static_cast<float>(dgamma[c] + dg[c]);
    dbeta[c] = static_cast<float>(dbeta[c] + db[c]);
  }
}

}  // namespace fp8lm::cpu::ref
