// LayerNorm and RMSNorm on the device, the CPU kernels' arithmetic bit for bit.
//
// A row's sums follow kernels/cpu/row_reduce.h's lane_sum exactly: 16 lanes, lane j adding
// columns j, j+16, j+32, ... in order from 0, then the 16 partials added in lane order. Here
// the 16 lanes are the threads of a half-warp, so each row belongs to one half-warp and a block
// of 256 threads takes 16 rows. Every operation is an explicit round-to-nearest intrinsic,
// which the compiler never contracts into a fused multiply-add (the CPU build has
// -ffp-contract=off), so mean, rstd and every output equal the CPU kernels' bits, and the FP8
// codes and statistics follow. The row is read from global memory once per pass (three
// passes); it stays in L1/L2 between passes for the widths of a transformer.
//
// Backward: dx per row the same way; dgamma/dbeta as deterministic column sums
// (column_sum.cuh), which match the CPU bits when rows <= kChunkRows and its float rounding
// otherwise.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/norm_out.cuh"
#include "kernels/cuda/norms.h"

namespace fp8lm::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kLanes = 16;  // row_reduce.h's kLanes
constexpr int kRowsPerBlock = kBlock / kLanes;

// The sum of the 16 partials of this thread's half-warp, in lane order from 0, as lane_sum
// ends. Every lane of the warp must call it (it shuffles across the whole warp); both halves
// get their own total.
__device__ float half_warp_total(float part) {
  const int first = static_cast<int>(threadIdx.x & 16u);
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum = __fadd_rn(sum, __shfl_sync(0xffffffffu, part, first + j));
  return sum;
}

// Which row this thread's half-warp owns and where its lane starts. A half-warp past the last
// row gets no columns (its loops are empty) but still joins the shuffles.
struct RowLane {
  int64_t row;
  int64_t cols;  // C, or 0 past the last row
  int64_t base;  // row * C, or 0 past the last row
  int lane;

  __device__ RowLane(int64_t rows, int64_t C) {
    row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kLanes;
    lane = static_cast<int>(threadIdx.x % kLanes);
    const bool active = row < rows;
    cols = active ? C : 0;
    base = active ? row * C : 0;
  }
  __device__ bool active() const { return cols != 0; }
};

// Pass 1 of both forward kernels: reads x (and r), writes s = x + r when r is given, and
// returns this lane's partial of lane_sum(term(v)) over the row's values v.
template <typename Term>
__device__ float load_row_partial(const RowLane& t, float* s, const float* x, const float* r,
                                  Term term) {
  float part = 0.0f;
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    float v = x[t.base + c];
    if (r != nullptr) {
      v = __fadd_rn(v, r[t.base + c]);
      s[t.base + c] = v;  // add_row; the later passes read it back from the same thread
    }
    part = __fadd_rn(part, term(v));
  }
  return part;
}

template <DType K>
__global__ void __launch_bounds__(kBlock)
    layernorm_forward_kernel(ProducerOut out, float* s, float* mean_out, float* rstd_out,
                             const float* x, const float* r, const float* gamma, const float* beta,
                             int64_t rows, int64_t C, float eps) {
  OutWriter<K> w(out);
  const RowLane t(rows, C);
  const float n = static_cast<float>(C);
  const float* v = r != nullptr ? s : x;  // the row being normalized

  const float mean =
      __fdiv_rn(half_warp_total(load_row_partial(t, s, x, r, [](float a) { return a; })), n);
  float part = 0.0f;
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const float d = __fsub_rn(v[t.base + c], mean);
    part = __fadd_rn(part, __fmul_rn(d, d));
  }
  const float var = __fdiv_rn(half_warp_total(part), n);
  const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));

  // (x - mean) * rstd * gamma + beta, left to right as the CPU writes it.
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const float xhat = __fmul_rn(__fsub_rn(v[t.base + c], mean), rstd);
    w.put(t.base + c, __fadd_rn(__fmul_rn(xhat, gamma[c]), beta[c]));
  }
  if (t.active() && t.lane == 0) {
    if (mean_out != nullptr) mean_out[t.row] = mean;
    if (rstd_out != nullptr) rstd_out[t.row] = rstd;
  }
  w.finish();
}

template <DType K>
__global__ void __launch_bounds__(kBlock)
    rmsnorm_forward_kernel(ProducerOut out, float* s, float* rstd_out, const float* x,
                           const float* r, const float* gamma, int64_t rows, int64_t C, float eps) {
  OutWriter<K> w(out);
  const RowLane t(rows, C);
  const float n = static_cast<float>(C);
  const float* v = r != nullptr ? s : x;

  const float ms = __fdiv_rn(
      half_warp_total(load_row_partial(t, s, x, r, [](float a) { return __fmul_rn(a, a); })), n);
  const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, eps)));

  // x * rstd * gamma, left to right.
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    w.put(t.base + c, __fmul_rn(__fmul_rn(v[t.base + c], rstd), gamma[c]));
  }
  if (t.active() && t.lane == 0 && rstd_out != nullptr) rstd_out[t.row] = rstd;
  w.finish();
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gamma * dy, xhat = (x - mean) * rstd.
__global__ void __launch_bounds__(kBlock)
    layernorm_backward_dx_kernel(float* dx, const float* dy, const float* x, const float* gamma,
                                 const float* mean, const float* rstd, int64_t rows, int64_t C) {
  const RowLane t(rows, C);
  const float n = static_cast<float>(C);
  const float m = t.active() ? mean[t.row] : 0.0f;
  const float sd = t.active() ? rstd[t.row] : 0.0f;

  float part_g = 0.0f, part_gx = 0.0f;
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const int64_t i = t.base + c;
    const float g = __fmul_rn(gamma[c], dy[i]);
    part_g = __fadd_rn(part_g, g);
    part_gx = __fadd_rn(part_gx, __fmul_rn(g, __fmul_rn(__fsub_rn(x[i], m), sd)));
  }
  const float g_mean = __fdiv_rn(half_warp_total(part_g), n);
  const float gx_mean = __fdiv_rn(half_warp_total(part_gx), n);

  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const int64_t i = t.base + c;
    const float xhat = __fmul_rn(__fsub_rn(x[i], m), sd);
    const float g = __fmul_rn(gamma[c], dy[i]);
    const float inner = __fsub_rn(__fsub_rn(g, g_mean), __fmul_rn(xhat, gx_mean));
    dx[i] = __fadd_rn(dx[i], __fmul_rn(sd, inner));
  }
}

// dx += rstd * (g - xhat * mean(g * xhat)), g = gamma * dy, xhat = x * rstd.
__global__ void __launch_bounds__(kBlock)
    rmsnorm_backward_dx_kernel(float* dx, const float* dy, const float* x, const float* gamma,
                               const float* rstd, int64_t rows, int64_t C) {
  const RowLane t(rows, C);
  const float sd = t.active() ? rstd[t.row] : 0.0f;

  float part = 0.0f;
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const int64_t i = t.base + c;
    part = __fadd_rn(part, __fmul_rn(__fmul_rn(gamma[c], dy[i]), __fmul_rn(x[i], sd)));
  }
  const float gx_mean = __fdiv_rn(half_warp_total(part), static_cast<float>(C));

  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const int64_t i = t.base + c;
    const float g = __fmul_rn(gamma[c], dy[i]);
    const float inner = __fsub_rn(g, __fmul_rn(__fmul_rn(x[i], sd), gx_mean));
    dx[i] = __fadd_rn(dx[i], __fmul_rn(sd, inner));
  }
}

// dgamma += sum_r dy * xhat, dbeta += sum_r dy.
struct LayerNormParamTerms {
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* t) const {
    const int64_t i = r * C + c;
    t[0] = __fmul_rn(dy[i], __fmul_rn(__fsub_rn(x[i], mean[r]), rstd[r]));
    t[1] = dy[i];
  }
};

// dgamma += sum_r dy * x * rstd.
struct RmsNormParamTerm {
  const float* dy;
  const float* x;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* t) const {
    const int64_t i = r * C + c;
    t[0] = __fmul_rn(dy[i], __fmul_rn(x[i], rstd[r]));
  }
};

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(ceil_div(rows, kRowsPerBlock));
}

}  // namespace

void layernorm_forward(ProducerOut out, float* s, float* mean, float* rstd, const float* x,
                       const float* r, const float* gamma, const float* beta, int64_t rows,
                       int64_t C, float eps, cudaStream_t stream) {
  const DType kind = producer_out_dtype(out, "layernorm_forward");
  if (r != nullptr && s == nullptr) throw Error("layernorm_forward: residual r without s");
  if (rows <= 0 || C <= 0) return;
  with_out_dtype(kind, [&](auto k) {
    layernorm_forward_kernel<decltype(k)::value><<<row_blocks(rows), kBlock, 0, stream>>>(
        out, s, mean, rstd, x, r, gamma, beta, rows, C, eps);
    FP8LM_CUDA_CHECK_LAUNCH();
  });
}

void rmsnorm_forward(ProducerOut out, float* s, float* rstd, const float* x, const float* r,
                     const float* gamma, int64_t rows, int64_t C, float eps, cudaStream_t stream) {
  const DType kind = producer_out_dtype(out, "rmsnorm_forward");
  if (r != nullptr && s == nullptr) throw Error("rmsnorm_forward: residual r without s");
  if (rows <= 0 || C <= 0) return;
  with_out_dtype(kind, [&](auto k) {
    rmsnorm_forward_kernel<decltype(k)::value>
        <<<row_blocks(rows), kBlock, 0, stream>>>(out, s, rstd, x, r, gamma, rows, C, eps);
    FP8LM_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  layernorm_backward_dx_kernel<<<row_blocks(rows), kBlock, 0, stream>>>(dx, dy, x, gamma, mean,
                                                                        rstd, rows, C);
  FP8LM_CUDA_CHECK_LAUNCH();
  column_sums<2>(ColumnDst<2>{{dgamma, dbeta}}, LayerNormParamTerms{dy, x, mean, rstd, C}, rows, C,
                 stream);
}

void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t rows, int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  rmsnorm_backward_dx_kernel<<<row_blocks(rows), kBlock, 0, stream>>>(dx, dy, x, gamma, rstd, rows,
                                                                      C);
  FP8LM_CUDA_CHECK_LAUNCH();
  column_sums<1>(ColumnDst<1>{{dgamma}}, RmsNormParamTerm{dy, x, rstd, C}, rows, C, stream);
}

}  // namespace fp8lm::cuda
