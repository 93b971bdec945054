#include "kernels/cpu/norms.h"

#include <algorithm>

#include "kernels/cpu/row_reduce.h"
#include "kernels/norm_ops.h"

namespace fp8lm::cpu {
namespace {

// One row of the forward pass: s = x + r first when r is given. Out of line on purpose: the
// FP32 and the FP8 kernels run the same machine code, so their results are bit-identical
// whatever the compiler would contract.
template <class N>
[[gnu::noinline]] void forward_row(float* y, float* s, float* mean_out, float* rstd_out,
                                   const float* x, const float* r, const float* gamma,
                                   const float* beta, int64_t C, float eps) {
  if (r != nullptr) {
    add_row(s, x, r, C);
    x = s;
  }
  const float n = static_cast<float>(C);
  float mean = 0.0f;
  if constexpr (N::centred) {
    mean = lane_sum(C, [x](int64_t i) { return x[i]; }) / n;
    *mean_out = mean;
  }
  // Two passes for LayerNorm (deviations from the mean) rather than E[x²] - mean²: no
  // cancellation when |mean| is large against the spread.
  const float var = lane_sum(C, [x, mean](int64_t i) { return N::spread(x[i], mean); }) / n;
  const float rstd = N::rstd(var, eps);
  for (int64_t c = 0; c < C; ++c)
    y[c] = N::out(N::xhat(x[c], mean, rstd), gamma[c], N::centred ? beta[c] : 0.0f);
  *rstd_out = rstd;
}

template <class N>
void backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
              const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t C) {
  const bool parallel = rows * C >= kParallelMin;
  const float n = static_cast<float>(C);
  const auto row_mean = [&](int64_t r) { return N::centred ? mean[r] : 0.0f; };
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const float m = row_mean(r), s = rstd[r];
    float g_mean = 0.0f;
    if constexpr (N::centred)
      g_mean = lane_sum(C, [=](int64_t i) { return gamma[i] * dyr[i]; }) / n;
    const float gx_mean =
        lane_sum(C, [=](int64_t i) { return gamma[i] * dyr[i] * N::xhat(xr[i], m, s); }) / n;
    for (int64_t c = 0; c < C; ++c)
      dx[r * C + c] += N::dx(s, gamma[c] * dyr[c], g_mean, N::xhat(xr[c], m, s), gx_mean);
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
      const float m = row_mean(r), s = rstd[r];
      for (int64_t j = 0; j < width; ++j) {
        g[j] += dyr[j] * N::xhat(xr[j], m, s);
        if constexpr (N::centred) be[j] += dyr[j];
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dgamma[c0 + j] += g[j];
      if constexpr (N::centred) dbeta[c0 + j] += be[j];
    }
  }
}

}  // namespace

void norm_forward(Normalization kind, float* y, float* s, float* mean, float* rstd, const float* x,
                  const float* r, const float* gamma, const float* beta, int64_t rows, int64_t C,
                  float eps) {
  with_normalization(kind, [&](auto op) {
    using N = decltype(op);
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
      forward_row<N>(y + i * C, s + (r ? i * C : 0), mean + i, rstd + i, x + i * C,
                     r ? r + i * C : nullptr, gamma, beta, C, eps);
    }
  });
}

CastStats norm_forward_fp8(Normalization kind, uint8_t* y, float scale, DType f, float* s,
                           float* mean, float* rstd, const float* x, const float* r,
                           const float* gamma, const float* beta, int64_t rows, int64_t C,
                           float eps, bf16_t* decoded) {
  return with_normalization(kind, [&](auto op) {
    return produce_fp8_rows(y, decoded, scale, f, rows, C, rows * C, [&](int64_t i, float* row) {
      forward_row<decltype(op)>(row, s + (r ? i * C : 0), mean + i, rstd + i, x + i * C,
                                r ? r + i * C : nullptr, gamma, beta, C, eps);
    });
  });
}

void norm_forward_bf16(Normalization kind, bf16_t* y, float* s, float* mean, float* rstd,
                       const float* x, const float* r, const float* gamma, const float* beta,
                       int64_t rows, int64_t C, float eps) {
  with_normalization(kind, [&](auto op) {
    produce_bf16_rows(y, rows, C, rows * C, [&](int64_t i, float* row) {
      forward_row<decltype(op)>(row, s + (r ? i * C : 0), mean + i, rstd + i, x + i * C,
                                r ? r + i * C : nullptr, gamma, beta, C, eps);
    });
  });
}

void norm_forward_blocks(Normalization kind, const BlockProducerOut& y, float* s, float* mean,
                         float* rstd, const float* x, const float* r, const float* gamma,
                         const float* beta, int64_t C, float eps) {
  with_normalization(kind, [&](auto op) {
    produce_block_rows(y, C, [&](int64_t i, float* row) {
      forward_row<decltype(op)>(row, s + (r ? i * C : 0), mean + i, rstd + i, x + i * C,
                                r ? r + i * C : nullptr, gamma, beta, C, eps);
    });
  });
}

void norm_backward(Normalization kind, float* dx, float* dgamma, float* dbeta, const float* dy,
                   const float* x, const float* gamma, const float* mean, const float* rstd,
                   int64_t rows, int64_t C) {
  with_normalization(kind, [&](auto op) {
    backward<decltype(op)>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, C);
  });
}

}  // namespace fp8lm::cpu
