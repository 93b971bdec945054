// Bias, activations and element-wise adds on the device.
//
// GELU and SwiGLU are the CPU's portable twins (cpu::scalar in kernels/cpu/activations.cpp)
// step for step: the same exp (a clamped Cody-Waite reduction and a degree-6 polynomial, with
// the constants of kernels/activation_constants.h), every operation an explicit round-to-nearest
// intrinsic so that nothing is contracted into a fused multiply-add, and IEEE division. Their
// results are the scalar twin's bits; the CPU's AVX-512 twin fuses its multiply-adds and can differ
// in the last bits. ReLU, the bias and the adds are exact.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/activation_constants.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/norm_out.cuh"

namespace fp8lm::cuda {
namespace {

namespace k = act_const;

constexpr int kBlock = 256;

// 2^e for the e that keep it a normal float.
__device__ float pow2(int32_t e) {
  return __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
}

// scalar::exp_clamped. The comparisons are false for NaN, which passes through; 2^n is applied
// in two halves, each a normal power of two, so the last product rounds once into the
// subnormals or Inf.
__device__ float exp_clamped(float t) {
  t = t < k::kExpMin ? k::kExpMin : t;
  t = t > k::kExpMax ? k::kExpMax : t;
  const float shifted = __fadd_rn(__fmul_rn(t, k::kLog2e), k::kRoundShift);
  const float n = __fsub_rn(shifted, k::kRoundShift);
  float r = __fsub_rn(t, __fmul_rn(n, k::kLn2Hi));
  r = __fsub_rn(r, __fmul_rn(n, k::kLn2Lo));
  float p = __fadd_rn(__fmul_rn(k::kExp6, r), k::kExp5);
  p = __fadd_rn(__fmul_rn(p, r), k::kExp4);
  p = __fadd_rn(__fmul_rn(p, r), k::kExp3);
  p = __fadd_rn(__fmul_rn(p, r), k::kExp2);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  // n read from the shifted float's low bits: a NaN never meets a float-to-int conversion.
  const auto e = static_cast<int32_t>(__float_as_uint(shifted) - __float_as_uint(k::kRoundShift));
  const int32_t half = e >> 1;
  return __fmul_rn(__fmul_rn(p, pow2(half)), pow2(e - half));
}

// exp(-2u) for GELU's gate sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³); x2 = x².
__device__ float gelu_exp(float x, float x2) {
  return exp_clamped(__fmul_rn(x, __fadd_rn(__fmul_rn(x2, k::kGateCubic), k::kGateLinear)));
}

__device__ float sigmoid(float a) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_clamped(-a)));
}

// x * sigmoid(2u) as one division.
__device__ float gelu(float x) {
  return __fdiv_rn(x, __fadd_rn(1.0f, gelu_exp(x, __fmul_rn(x, x))));
}

// dy * gelu'(x), gelu' = s (1 + x (1 - s) 2u') with s = sigmoid(2u).
__device__ float gelu_backward(float dy, float x) {
  const float x2 = __fmul_rn(x, x);
  const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, gelu_exp(x, x2)));
  const float slope = __fadd_rn(__fmul_rn(x2, k::kSlopeCubic), k::kSlopeLinear);
  const float inner = __fadd_rn(__fmul_rn(__fmul_rn(x, slope), __fsub_rn(1.0f, s)), 1.0f);
  return __fmul_rn(dy, __fmul_rn(s, inner));
}

// max(x, 0) as the CPU writes it: NaN and -0 pass through.
__device__ float relu(float x) {
  return x < 0.0f ? 0.0f : x;
}

// silu(a) b, a sigmoid(a) as one division.
__device__ float swiglu(float a, float b) {
  return __fmul_rn(__fdiv_rn(a, __fadd_rn(1.0f, exp_clamped(-a))), b);
}

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

// h [rows, C] (GELU, ReLU) or [rows, 2C] (SwiGLU: gate | value); out [rows, C].
template <Activation A, DType K>
__global__ void __launch_bounds__(kBlock)
    bias_act_kernel(ProducerOut out, float* h, const float* bias, int64_t rows, int64_t C) {
  OutWriter<K> w(out);
  for_rows_cols(rows, C, [&](int64_t r, int64_t c) {
    if constexpr (A == Activation::Swiglu) {
      float* hr = h + r * 2 * C;
      float a = hr[c], b = hr[C + c];
      if (bias != nullptr) {
        a = __fadd_rn(a, bias[c]);
        b = __fadd_rn(b, bias[C + c]);
        hr[c] = a;
        hr[C + c] = b;
      }
      w.put(r * C + c, swiglu(a, b));
    } else {
      const int64_t i = r * C + c;
      float v = h[i];
      if (bias != nullptr) {
        v = __fadd_rn(v, bias[c]);
        h[i] = v;
      }
      w.put(i, A == Activation::Gelu ? gelu(v) : relu(v));
    }
  });
  w.finish();
}

template <Activation A>
__global__ void __launch_bounds__(kBlock)
    act_backward_kernel(float* dh, const float* dy, const float* h, int64_t rows, int64_t C) {
  for_rows_cols(rows, C, [&](int64_t r, int64_t c) {
    if constexpr (A == Activation::Swiglu) {
      // silu'(a) = s (1 + a (1 - s)): da = dy s b (1 + a (1 - s)), db = dy s a.
      const float* hr = h + r * 2 * C;
      const float a = hr[c], b = hr[C + c];
      const float s = sigmoid(a);
      const float gs = __fmul_rn(dy[r * C + c], s);
      const float inner = __fadd_rn(__fmul_rn(a, __fsub_rn(1.0f, s)), 1.0f);
      dh[r * 2 * C + c] = __fmul_rn(__fmul_rn(gs, b), inner);
      dh[r * 2 * C + C + c] = __fmul_rn(gs, a);
    } else if constexpr (A == Activation::Gelu) {
      const int64_t i = r * C + c;
      dh[i] = gelu_backward(dy[i], h[i]);
    } else {
      const int64_t i = r * C + c;
      dh[i] = h[i] > 0.0f ? dy[i] : 0.0f;  // 0 at 0 and for NaN, as the CPU
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
    constexpr DType K = decltype(kk)::value;
    switch (act) {
      case Activation::Gelu:
        bias_act_kernel<Activation::Gelu, K><<<grid, kBlock, 0, stream>>>(out, h, bias, rows, C);
        break;
      case Activation::Relu:
        bias_act_kernel<Activation::Relu, K><<<grid, kBlock, 0, stream>>>(out, h, bias, rows, C);
        break;
      case Activation::Swiglu:
        bias_act_kernel<Activation::Swiglu, K><<<grid, kBlock, 0, stream>>>(out, h, bias, rows, C);
        break;
    }
    FP8LM_CUDA_CHECK_LAUNCH();
  });
}

void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  const dim3 grid = grid_2d(rows, C);
  switch (act) {
    case Activation::Gelu:
      act_backward_kernel<Activation::Gelu><<<grid, kBlock, 0, stream>>>(dh, dy, h, rows, C);
      break;
    case Activation::Relu:
      act_backward_kernel<Activation::Relu><<<grid, kBlock, 0, stream>>>(dh, dy, h, rows, C);
      break;
    case Activation::Swiglu:
      act_backward_kernel<Activation::Swiglu><<<grid, kBlock, 0, stream>>>(dh, dy, h, rows, C);
      break;
  }
  FP8LM_CUDA_CHECK_LAUNCH();
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
