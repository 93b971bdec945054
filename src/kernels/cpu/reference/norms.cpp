// The normalizations' oracle: plain loops, double accumulation, no threads, no intrinsics.
// LayerNorm centres each row and adds beta; RMSNorm does neither.
#include <cmath>
#include <vector>

#include "kernels/cpu/norms.h"

namespace fp8lm::cpu::ref {

void norm_forward(Normalization kind, float* y, float* mean, float* rstd, const float* x,
                  const float* gamma, const float* beta, int64_t rows, int64_t C, float eps) {
  const bool centred = normalization_centred(kind);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += xr[c];
    const double m = centred ? sum / static_cast<double>(C) : 0.0;
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    const double s = 1.0 / std::sqrt(var / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = static_cast<float>((xr[c] - m) * s * gamma[c] + (centred ? beta[c] : 0.0));
    if (centred) mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(s);
  }
}

void norm_backward(Normalization kind, float* dx, float* dgamma, float* dbeta, const float* dy,
                   const float* x, const float* gamma, const float* mean, const float* rstd,
                   int64_t rows, int64_t C) {
  const bool centred = normalization_centred(kind);
  std::vector<double> dg(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const double m = centred ? mean[r] : 0.0, s = rstd[r];
    double g_sum = 0.0, gx_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (xr[c] - m) * s;
      const double g = static_cast<double>(gamma[c]) * dyr[c];
      g_sum += g;
      gx_sum += g * xhat;
      dg[c] += dyr[c] * xhat;
      db[c] += dyr[c];
    }
    const double g_mean = centred ? g_sum / static_cast<double>(C) : 0.0;
    const double gx_mean = gx_sum / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (xr[c] - m) * s;
      const double g = static_cast<double>(gamma[c]) * dyr[c];
      dx[r * C + c] = static_cast<float>(dx[r * C + c] + s * (g - g_mean - xhat * gx_mean));
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    dgamma[c] = static_cast<float>(dgamma[c] + dg[c]);
    if (centred) dbeta[c] = static_cast<float>(dbeta[c] + db[c]);
  }
}

}  // namespace fp8lm::cpu::ref
