#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/row_reduce.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8lm::cpu {
namespace {

// One row of the forward pass. Out of line on purpose: the FP32 and the FP8 kernels run the
// same machine code, so their results are bit-identical whatever the compiler would contract.
[[gnu::noinline]] void forward_row(float* y, float* rstd_out, const float* x, const float* gamma,
                                   int64_t C, float eps) {
  const float ms = lane_sum(C, [x](int64_t i) { return x[i] * x[i]; }) / static_cast<float>(C);
  const float rstd = 1.0f / std::sqrt(ms + eps);
  for (int64_t c = 0; c < C; ++c) y[c] = x[c] * rstd * gamma[c];
  *rstd_out = rstd;
}

}  // namespace

void add_rmsnorm_forward(float* s, float* y, float* rstd, const float* x, const float* r,
                         const float* gamma, int64_t rows, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    add_row(s + i * C, x + i * C, r + i * C, C);
    forward_row(y + i * C, rstd + i, s + i * C, gamma, C, eps);
  }
}

CastStats add_rmsnorm_forward_fp8(float* s, uint8_t* y, float scale, DType f, float* rstd,
                                  const float* x, const float* r, const float* gamma, int64_t rows,
                                  int64_t C, float eps) {
  return produce_fp8_rows(y, scale, f, rows, C, rows * C, [&](int64_t i, float* row) {
    add_row(s + i * C, x + i * C, r + i * C, C);
    forward_row(row, rstd + i, s + i * C, gamma, C, eps);
  });
}

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int64_t rows,
                     int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) forward_row(y + r * C, rstd + r, x + r * C, gamma, C, eps);
}

CastStats rmsnorm_forward_fp8(uint8_t* y, float scale, DType f, float* rstd, const float* x,
                              const float* gamma, int64_t rows, int64_t C, float eps) {
  return produce_fp8_rows(y, scale, f, rows, C, rows * C, [&](int64_t r, float* row) {
    forward_row(row, rstd + r, x + r * C, gamma, C, eps);
  });
}

void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t rows, int64_t C) {
  const bool parallel = rows * C >= kParallelMin;
  // dx: with xhat = x * rstd and g = gamma * dy, dx = rstd * (g - xhat * mean(g * xhat)).
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    float* dxr = dx + r * C;
    const float s = rstd[r];
    const float gx_mean = lane_sum(C, [=](int64_t i) { return gamma[i] * dyr[i] * (xr[i] * s); }) /
                          static_cast<float>(C);
    for (int64_t c = 0; c < C; ++c) dxr[c] += s * (gamma[c] * dyr[c] - xr[c] * s * gx_mean);
  }

  // dgamma: column sums over rows. Threads own blocks of columns and add rows in row order,
  // so every column's sum has the same bits for any thread count.
  constexpr int64_t kCols = 64;
  const int64_t blocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kCols, width = std::min(kCols, C - c0);
    float g[kCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * C + c0;
      const float* dyr = dy + r * C + c0;
      const float s = rstd[r];
      for (int64_t j = 0; j < width; ++j) g[j] += dyr[j] * (xr[j] * s);
    }
    for (int64_t j = 0; j < width; ++j) dgamma[c0 + j] += g[j];
  }
}

}  // namespace fp8lm::cpu
