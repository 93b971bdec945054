// Bias, activations and element-wise adds on the device.
//
// Each activation is its functor (kernels/activation_ops.h), the same source the CPU's portable
// twins run, so the results are their bits; the CPU's AVX-512 rows fuse their multiply-adds
// and can differ in the last bits. ReLU, the bias and the adds are exact.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/activation_ops.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/norm_out.cuh"

namespace fp8lm::cuda {
namespace {

constexpr int kBlock = 256;

// A 2-D grid over [rows, cols]: blocks stride over rows (y) and column tiles (x), so no thread
// divides an index, and every thread reaches the end of the kernel.
dim3 grid_2d(int64_t rows, int64_t cols) {
  const int64_t gx = std::min<int64_t>(ceil_div(cols, kBlock), 64);
  const int64_t gy = std::min<int64_t>({rows, std::max<int64_t>(1, 8192 / gx), 65535});
  return {static_cast<unsigned>(gx), static_cast<unsigned>(gy)};
}

unsigned grid_1d(int64_t n) {
  return grid_stride_blocks(n, kBlock, 8192);
}

// Calls f(r, c) for this thread's share of [rows, cols] under grid_2d.
template <typename F>
__device__ void for_rows_cols(int64_t rows, int64_t cols, F f) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = global_thread(); c < cols; c += grid_threads()) f(r, c);
  }
}

// h [rows, C], or [rows, 2C] for a gated Op (gate | value); out [rows, C].
template <class Op, DType K>
__global__ void __launch_bounds__(kBlock)
    bias_act_kernel(ProducerOut out, float* h, const float* bias, int64_t rows, int64_t C) {
  OutWriter<K> w(out);
  for_rows_cols(rows, C, [&](int64_t r, int64_t c) {
    if constexpr (Op::gated) {
      float* hr = h + r * 2 * C;
      float a = hr[c], b = hr[C + c];
      if (bias != nullptr) {
        a = __fadd_rn(a, bias[c]);
        b = __fadd_rn(b, bias[C + c]);
        hr[c] = a;
        hr[C + c] = b;
      }
      w.put(r * C + c, Op::forward(a, b));
    } else {
      const int64_t i = r * C + c;
      float v = h[i];
      if (bias != nullptr) {
        v = __fadd_rn(v, bias[c]);
        h[i] = v;
      }
      w.put(i, Op::forward(v));
    }
  });
  w.finish();
}

template <class Op>
__global__ void __launch_bounds__(kBlock)
    act_backward_kernel(float* dh, const float* dy, const float* h, int64_t rows, int64_t C) {
  for_rows_cols(rows, C, [&](int64_t r, int64_t c) {
    if constexpr (Op::gated) {
      const float* hr = h + r * 2 * C;
      Op::backward(dy[r * C + c], hr[c], hr[C + c], dh[r * 2 * C + c], dh[r * 2 * C + C + c]);
    } else {
      const int64_t i = r * C + c;
      dh[i] = Op::backward(dy[i], h[i]);
    }
  });
}

__global__ void __launch_bounds__(kBlock)
    add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t C) {
  for_rows_cols(rows, C,
                [&](int64_t r, int64_t c) { y[r * C + c] = __fadd_rn(y[r * C + c], bias[c]); });
}

__global__ void __launch_bounds__(kBlock)
    add_kernel(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = __fadd_rn(a[i], b[i]);
}

struct BiasGradTerm {
  const float* dy;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* t) const { t[0] = dy[r * C + c]; }
};

}  // namespace

void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act, int64_t rows,
                      int64_t C, cudaStream_t stream) {
  const DType kind = producer_out_dtype(out, "bias_act_forward");
  if (rows <= 0 || C <= 0) return;
  const dim3 grid = grid_2d(rows, C);
  with_out_dtype(kind, [&](auto kk) {
    with_activation(act, [&](auto op) {
      bias_act_kernel<decltype(op), decltype(kk)::value>
          <<<grid, kBlock, 0, stream>>>(out, h, bias, rows, C);
      FP8LM_CUDA_CHECK_LAUNCH();
    });
  });
}

void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  with_activation(act, [&](auto op) {
    act_backward_kernel<decltype(op)><<<grid_2d(rows, C), kBlock, 0, stream>>>(dh, dy, h, rows, C);
    FP8LM_CUDA_CHECK_LAUNCH();
  });
}

void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C, cudaStream_t stream) {
  column_sums<1>(ColumnDst<1>{{dbias}}, BiasGradTerm{dy, C}, rows, C, stream);
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  add_bias_kernel<<<grid_2d(rows, C), kBlock, 0, stream>>>(y, bias, rows, C);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void add(float* y, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<grid_1d(n), kBlock, 0, stream>>>(y, a, b, n);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void accumulate(float* y, const float* x, int64_t n, cudaStream_t stream) {
  add(y, y, x, n, stream);
}

}  // namespace fp8lm::cuda
