#include "kernels/cpu/activations.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "core/grown.h"
#include "kernels/activation_ops.h"
#include "kernels/cpu/activations_isa.h"
#include "kernels/cpu/casts.h"
#include "kernels/cpu/row_reduce.h"

namespace fp8lm::cpu {
namespace {

bool use_avx512() {
  static const bool on = cpu_features().avx512;
  return on;
}

// An activation's AVX-512 rows, where it has them (activations_isa.h): GELU and SwiGLU, whose
// exp dominates a step's pointwise time. ReLU and the rest run their functor, which the
// compiler vectorizes as it is.
template <class Op>
struct Avx512Rows;

template <>
struct Avx512Rows<act::Gelu> {
  static void forward(float* y, const float* h, int64_t F) { avx512::gelu_row(y, h, F); }
  static void backward(float* dh, const float* dy, const float* h, int64_t F) {
    avx512::gelu_backward_row(dh, dy, h, F);
  }
};

template <>
struct Avx512Rows<act::Swiglu> {
  static void forward(float* y, const float* h, int64_t F) { avx512::swiglu_row(y, h, h + F, F); }
  static void backward(float* dh, const float* dy, const float* h, int64_t F) {
    avx512::swiglu_backward_row(dh, dh + F, dy, h, h + F, F);
  }
};

template <class Op>
constexpr bool kHasAvx512 = requires {
  Avx512Rows<Op>::forward;
};

// One row: y [F] = act(h), h [F] or [2F] (gated); each element a function of its own inputs,
// so where a value sits never changes its bits.
template <class Op>
void scalar_forward_row(float* y, const float* h, int64_t F) {
  if constexpr (Op::gated) {
    for (int64_t i = 0; i < F; ++i) y[i] = Op::forward(h[i], h[F + i]);
  } else {
    for (int64_t i = 0; i < F; ++i) y[i] = Op::forward(h[i]);
  }
}

template <class Op>
void scalar_backward_row(float* dh, const float* dy, const float* h, int64_t F) {
  if constexpr (Op::gated) {
    for (int64_t i = 0; i < F; ++i) Op::backward(dy[i], h[i], h[F + i], dh[i], dh[F + i]);
  } else {
    for (int64_t i = 0; i < F; ++i) dh[i] = Op::backward(dy[i], h[i]);
  }
}

// The rows are out of line on purpose: the FP32 and the fused FP8 kernels run the same machine
// code for an activation.
template <class Op>
[[gnu::noinline]] void forward_row(float* y, const float* h, int64_t F) {
  if constexpr (kHasAvx512<Op>) {
    if (use_avx512()) return Avx512Rows<Op>::forward(y, h, F);
  }
  scalar_forward_row<Op>(y, h, F);
}

template <class Op>
[[gnu::noinline]] void backward_row(float* dh, const float* dy, const float* h, int64_t F) {
  if constexpr (kHasAvx512<Op>) {
    if (use_avx512()) return Avx512Rows<Op>::backward(dh, dy, h, F);
  }
  scalar_backward_row<Op>(dh, dy, h, F);
}

template <class Op>
constexpr int64_t input_width(int64_t F) {
  return Op::gated ? 2 * F : F;
}

inline void add_bias_row(float* h, const float* bias, int64_t C) {
  for (int64_t c = 0; c < C; ++c) h[c] += bias[c];
}

}  // namespace

void add_bias(float* y, const float* bias, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) add_bias_row(y + r * C, bias, C);
}

void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C, bf16_t* dy16) {
  // Each thread owns a contiguous share of the columns and each column adds its rows in row
  // order from zero, then to dbias, so every column's sum has the same bits for any thread
  // count and either loop.
  constexpr int64_t kCols = 64;
#pragma omp parallel if (rows * C >= kParallelMin)
  {
    const auto [lo, hi] = thread_share(C);
    if (use_avx512()) {
      for (int64_t c0 = lo; c0 < hi; c0 += avx512::kColumnSumsWidth)
        avx512::column_sums(dbias + c0, dy + c0, rows, C,
                            std::min(avx512::kColumnSumsWidth, hi - c0),
                            dy16 ? dy16 + c0 : nullptr);
    } else {
      for (int64_t c0 = lo; c0 < hi; c0 += kCols) {
        const int64_t width = std::min(kCols, hi - c0);
        float acc[kCols] = {};
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < width; ++j) acc[j] += dy[r * C + c0 + j];
          if (dy16) fp32_to_bf16_serial(dy16 + r * C + c0, dy + r * C + c0, width);
        }
        for (int64_t j = 0; j < width; ++j) dbias[c0 + j] += acc[j];
      }
    }
  }
}

void bias_act_forward(float* y, float* h, const float* bias, Activation act, int64_t rows,
                      int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
#pragma omp parallel for schedule(static) if (rows * in >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      float* hr = h + r * in;
      if (bias) add_bias_row(hr, bias, in);
      forward_row<Op>(y + r * F, hr, F);
    }
  });
}

CastStats bias_act_forward_fp8(uint8_t* y, float scale, DType f, float* h, const float* bias,
                               Activation act, int64_t rows, int64_t F, bf16_t* decoded) {
  return with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
    return produce_fp8_rows(y, decoded, scale, f, rows, F, rows * in, [&](int64_t r, float* row) {
      float* hr = h + r * in;
      if (bias) add_bias_row(hr, bias, in);
      forward_row<Op>(row, hr, F);
    });
  });
}

void bias_act_forward_bf16(bf16_t* y, float* h, const float* bias, Activation act, int64_t rows,
                           int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
    produce_bf16_rows(y, rows, F, rows * in, [&](int64_t r, float* row) {
      float* hr = h + r * in;
      if (bias) add_bias_row(hr, bias, in);
      forward_row<Op>(row, hr, F);
    });
  });
}

void bias_act_forward_blocks(const BlockProducerOut& y, float* h, const float* bias, Activation act,
                             int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
    produce_block_rows(y, F, [&](int64_t r, float* row) {
      float* hr = h + r * in;
      if (bias) add_bias_row(hr, bias, in);
      forward_row<Op>(row, hr, F);
    });
  });
}

void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
#pragma omp parallel for schedule(static) if (rows * in >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) backward_row<Op>(dh + r * in, dy + r * F, h + r * in, F);
  });
}

void act_backward(float* dh, const float* dy, const bf16_t* h, Activation act, int64_t rows,
                  int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
#pragma omp parallel if (rows * in >= kParallelMin)
    {
      thread_local std::vector<float> widened;  // one row, in cache for backward_row
      float* hr = grown(widened, static_cast<size_t>(in));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        bf16_to_f32_serial(hr, h + r * in, in);
        backward_row<Op>(dh + r * in, dy + r * F, hr, F);
      }
    }
  });
}

namespace scalar {

void act_forward(float* y, const float* h, Activation act, int64_t rows, int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    for (int64_t r = 0; r < rows; ++r)
      scalar_forward_row<Op>(y + r * F, h + r * input_width<Op>(F), F);
  });
}

void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F) {
  with_activation(act, [&](auto op) {
    using Op = decltype(op);
    const int64_t in = input_width<Op>(F);
    for (int64_t r = 0; r < rows; ++r)
      scalar_backward_row<Op>(dh + r * in, dy + r * F, h + r * in, F);
  });
}

}  // namespace scalar

}  // namespace fp8lm::cpu
