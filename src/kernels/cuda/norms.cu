// The normalizations on the device: one kernel per op family over the functors of
// kernels/norm_ops.h, the CPU kernels' arithmetic bit for bit.
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
#include "kernels/norm_ops.h"

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

template <class N, DType K>
__global__ void __launch_bounds__(kBlock)
    norm_forward_kernel(ProducerOut out, float* s, float* mean_out, float* rstd_out, const float* x,
                        const float* r, const float* gamma, const float* beta, int64_t rows,
                        int64_t C, float eps) {
  OutWriter<K> w(out);
  const RowLane t(rows, C);
  const float n = static_cast<float>(C);
  const float* v = r != nullptr ? s : x;  // the row being normalized

  // Pass 1 sums the values for LayerNorm's mean, RMSNorm's squares for its variance.
  float mean = 0.0f, var;
  if constexpr (N::centred) {
    mean = __fdiv_rn(half_warp_total(load_row_partial(t, s, x, r, [](float a) { return a; })), n);
    float part = 0.0f;
    for (int64_t c = t.lane; c < t.cols; c += kLanes)
      part = __fadd_rn(part, N::spread(v[t.base + c], mean));
    var = __fdiv_rn(half_warp_total(part), n);
  } else {
    const auto square = [](float a) { return N::spread(a, 0.0f); };
    var = __fdiv_rn(half_warp_total(load_row_partial(t, s, x, r, square)), n);
  }
  const float rstd = N::rstd(var, eps);

  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const float xhat = N::xhat(v[t.base + c], mean, rstd);
    w.put(t.base + c, N::out(xhat, gamma[c], N::centred ? beta[c] : 0.0f));
  }
  if (t.active() && t.lane == 0) {
    if (N::centred && mean_out != nullptr) mean_out[t.row] = mean;
    if (rstd_out != nullptr) rstd_out[t.row] = rstd;
  }
  w.finish();
}

template <class N>
__global__ void __launch_bounds__(kBlock)
    norm_backward_dx_kernel(float* dx, const float* dy, const float* x, const float* gamma,
                            const float* mean, const float* rstd, int64_t rows, int64_t C) {
  const RowLane t(rows, C);
  const float n = static_cast<float>(C);
  const float m = N::centred && t.active() ? mean[t.row] : 0.0f;
  const float sd = t.active() ? rstd[t.row] : 0.0f;

  float part_g = 0.0f, part_gx = 0.0f;
  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const int64_t i = t.base + c;
    const float g = __fmul_rn(gamma[c], dy[i]);
    if constexpr (N::centred) part_g = __fadd_rn(part_g, g);
    part_gx = __fadd_rn(part_gx, __fmul_rn(g, N::xhat(x[i], m, sd)));
  }
  float g_mean = 0.0f;
  if constexpr (N::centred) g_mean = __fdiv_rn(half_warp_total(part_g), n);
  const float gx_mean = __fdiv_rn(half_warp_total(part_gx), n);

  for (int64_t c = t.lane; c < t.cols; c += kLanes) {
    const int64_t i = t.base + c;
    const float g = __fmul_rn(gamma[c], dy[i]);
    dx[i] = __fadd_rn(dx[i], N::dx(sd, g, g_mean, N::xhat(x[i], m, sd), gx_mean));
  }
}

// dgamma += sum_r dy * xhat and, centred, dbeta += sum_r dy.
template <class N>
struct ParamTerms {
  static constexpr int kSums = N::centred ? 2 : 1;
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* t) const {
    const int64_t i = r * C + c;
    t[0] = __fmul_rn(dy[i], N::xhat(x[i], N::centred ? mean[r] : 0.0f, rstd[r]));
    if constexpr (N::centred) t[1] = dy[i];
  }
};

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(ceil_div(rows, kRowsPerBlock));
}

}  // namespace

void norm_forward(Normalization kind, ProducerOut out, float* s, float* mean, float* rstd,
                  const float* x, const float* r, const float* gamma, const float* beta,
                  int64_t rows, int64_t C, float eps, cudaStream_t stream) {
  const DType dtype = producer_out_dtype(out, "norm_forward");
  if (r != nullptr && s == nullptr) throw Error("norm_forward: residual r without s");
  if (rows <= 0 || C <= 0) return;
  with_normalization(kind, [&](auto op) {
    with_out_dtype(dtype, [&](auto k) {
      norm_forward_kernel<decltype(op), decltype(k)::value>
          <<<row_blocks(rows), kBlock, 0, stream>>>(out, s, mean, rstd, x, r, gamma, beta, rows, C,
                                                    eps);
      FP8LM_CUDA_CHECK_LAUNCH();
    });
  });
}

void norm_backward(Normalization kind, float* dx, float* dgamma, float* dbeta, const float* dy,
                   const float* x, const float* gamma, const float* mean, const float* rstd,
                   int64_t rows, int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  with_normalization(kind, [&](auto op) {
    using N = decltype(op);
    norm_backward_dx_kernel<N>
        <<<row_blocks(rows), kBlock, 0, stream>>>(dx, dy, x, gamma, mean, rstd, rows, C);
    FP8LM_CUDA_CHECK_LAUNCH();
    constexpr int kSums = ParamTerms<N>::kSums;
    ColumnDst<kSums> dst{{dgamma}};
    if constexpr (N::centred) dst.p[1] = dbeta;
    column_sums<kSums>(dst, ParamTerms<N>{dy, x, mean, rstd, C}, rows, C, stream);
  });
}

}  // namespace fp8lm::cuda
