#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/row_reduce.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8lm::cpu {
namespace {

// One row of the forward pass. Out of line on purpose: the FP32 and the FP8 kernels run the
// same machine code, so their results are bit-identical whatever the compiler would contract.
[[gnu::noinline]] void forward_row(float* y, float* mean_out, float* rstd_out, const float* x,
                                   const float* gamma, const float* beta, int64_t C, float eps) {
  const float n = static_cast<float>(C);
  const float mean = lane_sum(C, [x](int64_t i) { return x[i]; }) / n;
  // Two passes (deviations from the mean) rather than E[x²] - mean²: no cancellation when
  // |mean| is large against the spread.
  const float var = lane_sum(C,
                             [x, mean](int64_t i) {
                               const float d = x[i] - mean;
                               return d * d;
                             }) /
                    n;
  const float rstd = 1.0f / std::sqrt(var + eps);
  for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
  *mean_out = mean;
  *rstd_out = rstd;
}

}  // namespace

void add_layernorm_forward(float* s, float* y, float* mean, float* rstd, const float* x,
                           const float* r, const float* gamma, const float* beta, int64_t rows,
                           int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    add_row(s + i * C, x + i * C, r + i * C, C);
    forward_row(y + i * C, mean + i, rstd + i, s + i * C, gamma, beta, C, eps);
  }
}

CastStats add_layernorm_forward_fp8(float* s, uint8_t* y, float scale, DType f, float* mean,
                                    float* rstd, const float* x, const float* r, const float* gamma,
                                    const float* beta, int64_t rows, int64_t C, float eps) {
  return produce_fp8_rows(y, scale, f, rows, C, rows * C, [&](int64_t i, float* row) {
    add_row(s + i * C, x + i * C, r + i * C, C);
    forward_row(row, mean + i, rstd + i, s + i * C, gamma, beta, C, eps);
  });
}

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    forward_row(y + r * C, mean + r, rstd + r, x + r * C, gamma, beta, C, eps);
}

CastStats layernorm_forward_fp8(uint8_t* y, float scale, DType f, float* mean, float* rstd,
                                const float* x, const float* gamma, const float* beta, int64_t rows,
                                int64_t C, float eps) {
  return produce_fp8_rows(y, scale, f, rows, C, rows * C, [&](int64_t r, float* row) {
    forward_row(row, mean + r, rstd + r, x + r * C, gamma, beta, C, eps);
  });
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C) {
  const bool parallel = rows * C >= kParallelMin;
  const float n = static_cast<float>(C);
  // dx: with xhat = (x - mean) * rstd and g = gamma * dy,
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). Each row is independent.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    float* dxr = dx + r * C;
    const float m = mean[r], s = rstd[r];
    const float g_mean = lane_sum(C, [=](int64_t i) { return gamma[i] * dyr[i]; }) / n;
    const float gx_mean =
        lane_sum(C, [=](int64_t i) { return gamma[i] * dyr[i] * ((xr[i] - m) * s); }) / n;
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (xr[c] - m) * s;
      dxr[c] += s * (gamma[c] * dyr[c] - g_mean - xhat * gx_mean);
    }
  }

  // dgamma, dbeta: column sums over rows. Threads own blocks of columns and add rows in row
  // order, so every column's sum has the same bits for any thread count.
  constexpr int64_t kCols = 64;
  const int64_t blocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kCols, width = std::min(kCols, C - c0);
    float g[kCols] = {}, be[kCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * C + c0;
      const float* dyr = dy + r * C + c0;
      const float m = mean[r], s = rstd[r];
      for (int64_t j = 0; j < width; ++j) {
        g[j] += dyr[j] * ((xr[j] - m) * s);
        be[j] += dyr[j];
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dgamma[c0 + j] += g[j];
      dbeta[c0 + j] += be[j];
    }
  }
}

}  // namespace fp8lm::cpu
