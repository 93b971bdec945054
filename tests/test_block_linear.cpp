// A Linear under each block-scaled recipe (issue 14): forward, the input gradient and the weight
// gradient each equal the double-precision product of the operands decoded with their block
// scales (and NVFP4's tensor scales), re-derived here from the quantizers' reference twins with
// the blocks TE uses for each GEMM: x and dy blocked along K, the weight in 2D blocks (block,
// nvfp4) or row-wise for forward and column-wise for dgrad (mxfp8), NVFP4's wgrad operands
// after the Hadamard transform. Tolerance: FP32 accumulation of K exact products (BF16 x BF16)
// and the tensor-scale multiply, (K + 3) * 2^-24 of the sum of the products' magnitudes.
// Shapes are not multiples of the blocks. Stochastic rounding: the same seed gives the same
// gradient bits, another seed other bits, both close to the nearest-rounding gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

#include "core/e2m1.h"
#include "core/e8m0.h"
#include "fp8/fp8_block_quantize.h"
#include "fp8/hadamard.h"
#include "fp8/mx_quantize.h"
#include "fp8/nvfp4_quantize.h"
#include "nn/autocast.h"
#include "nn/linear.h"
#include "nn/saved_activation.h"

namespace fp8lm {
namespace {

using test::randn;

// src [rows, cols] as the GEMM multiplies it under recipe r: each value decoded times its
// block's scale and the tensor's scale.
std::vector<double> decoded(const Fp8Recipe& r, bool weight, bool columnwise,
                            std::vector<float> src, int64_t rows, int64_t cols) {
  const auto n = static_cast<size_t>(rows * cols);
  std::vector<uint8_t> codes(n);
  std::vector<double> out(n);
  if (r.kind == ScalingKind::Mxfp8) {
    const BlockGrid g = columnwise ? BlockGrid{rows, cols, 32, 1} : BlockGrid{rows, cols, 1, 32};
    std::vector<uint8_t> s(static_cast<size_t>(g.blocks()));
    if (columnwise)
      mxfp8_quantize_columnwise_reference(codes.data(), s.data(), src.data(), rows, cols,
                                          DType::E4M3);
    else
      mxfp8_quantize_rowwise_reference(codes.data(), s.data(), src.data(), rows, cols, DType::E4M3);
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<double>(fp8_decode(codes[i], DType::E4M3)) *
               e8m0_decode(s[static_cast<size_t>(
                   g.block_of(static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols))]);
  } else if (r.kind == ScalingKind::Block) {
    const BlockGrid g = weight       ? fp8_block_2d(rows, cols)
                        : columnwise ? fp8_block_columnwise(rows, cols)
                                     : fp8_block_rowwise(rows, cols);
    std::vector<float> s(static_cast<size_t>(g.blocks()));
    fp8_block_quantize_reference(codes.data(), s.data(), src.data(), g, DType::E4M3, r.block);
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<double>(fp8_decode(codes[i], DType::E4M3)) *
               s[static_cast<size_t>(
                   g.block_of(static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols))];
  } else {
    const BlockGrid g = weight       ? nvfp4_2d(rows, cols)
                        : columnwise ? nvfp4_columnwise(rows, cols)
                                     : nvfp4_rowwise(rows, cols);
    if (columnwise && !weight) {
      std::vector<float> t(n);
      rht16_rows_reference(t.data(), src.data(), rows, cols);
      src = t;
    }
    float amax = 0;
    for (float v : src) amax = std::fmax(amax, std::fabs(v));
    std::vector<uint8_t> s(static_cast<size_t>(g.blocks()));
    nvfp4_quantize_reference(codes.data(), s.data(), src.data(), g, amax);
    const double tensor = 1.0 / static_cast<double>(nvfp4_global_encode_scale(amax));
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<double>(e2m1_decode(codes[i])) *
               fp8_decode(s[static_cast<size_t>(g.block_of(static_cast<int64_t>(i) / cols,
                                                           static_cast<int64_t>(i) % cols))],
                          DType::E4M3) *
               tensor;
  }
  return out;
}

// got [M, N] against sum_k a(m, k) * b(k, n) in double.
template <class A, class B>
void expect_product(const std::vector<float>& got, int64_t M, int64_t N, int64_t K, A a, B b,
                    const char* what) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        want += a(m, k) * b(k, n);
        mag += std::fabs(a(m, k) * b(k, n));
      }
      ASSERT_NEAR(got[static_cast<size_t>(m * N + n)], want,
                  static_cast<double>(K + 3) * 0x1p-24 * mag + 1e-30)
          << what << " " << m << "," << n;
    }
}

Fp8Recipe recipe(ScalingKind k) {
  Fp8Recipe r;
  r.kind = k;
  r.nvfp4.disable_stochastic_rounding = true;  // exact comparison; stochastic below
  return r;
}

TEST(BlockScaledLinear, EachGemmIsTheProductOfTheDecodedBlockScaledOperands) {
  const int64_t rows = 48, in = 160, out = 40;  // rows: NVFP4's Hadamard groups of 16
  // One Linear through every recipe and two weights: the weight's kept casts (linear.h) must
  // follow both the recipe and the weight.
  Linear lin("fc", in, out, false);
  for (const uint32_t weight_seed : {1u, 2u})
    for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
      const Fp8Recipe r = recipe(kind);
      SCOPED_TRACE(std::string(scaling_kind_name(kind)) + " weight " + std::to_string(weight_seed));
      if (kind == ScalingKind::Block)
        lin.weight().set_values(randn(static_cast<size_t>(in * out), weight_seed, 0.3f));
      lin.weight().grad.zero();
      const std::vector<float> w = lin.weight().value.to_host();
      const auto x = randn(static_cast<size_t>(rows * in), 3);
      const auto dy = randn(static_cast<size_t>(rows * out), 4, 0.01f);
      std::vector<float> y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in));
      {
        const TrainingForward training(true);
        const Autocast fp8(true, r);
        lin.forward(x.data(), y.data(), rows);
      }
      lin.backward(dy.data(), dx.data(), rows, false);
      const std::vector<float> dw = lin.weight().grad.to_host();

      const bool w2d = kind != ScalingKind::Mxfp8;
      const auto xr = decoded(r, false, false, x, rows, in);
      const auto wr = decoded(r, true, false, w, out, in);
      const auto wc = w2d ? wr : decoded(r, true, true, w, out, in);
      const auto gr = decoded(r, false, false, dy, rows, out);
      const auto gc = decoded(r, false, true, dy, rows, out);
      const auto xc = decoded(r, false, true, x, rows, in);
      const auto at = [](const std::vector<double>& v, int64_t cols) {
        return [&v, cols](int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; };
      };
      expect_product(
          y, rows, out, in, at(xr, in),
          [&](int64_t k, int64_t o) { return wr[static_cast<size_t>(o * in + k)]; }, "y");
      expect_product(dx, rows, in, out, at(gr, out), at(wc, in), "dx");
      expect_product(
          dw, out, in, rows,
          [&](int64_t o, int64_t k) { return gc[static_cast<size_t>(k * out + o)]; }, at(xc, in),
          "dW");
    }
}

std::vector<float> nvfp4_weight_gradient(Linear& lin, const Fp8Recipe& r,
                                         const std::vector<float>& x, const std::vector<float>& dy,
                                         int64_t rows, uint64_t seed) {
  std::vector<float> y(static_cast<size_t>(rows * lin.out_features()));
  lin.weight().grad.zero();
  {
    const TrainingForward training(true);
    const Autocast fp8(true, r, {}, seed);
    lin.forward(x.data(), y.data(), rows);
  }
  lin.backward(dy.data(), nullptr, rows);
  return lin.weight().grad.to_host();
}

TEST(BlockScaledLinear, StochasticRoundingIsSeededAndCloseToNearest) {
  const int64_t rows = 64, in = 48, out = 32;
  Linear lin("fc", in, out, false);
  lin.weight().set_values(randn(static_cast<size_t>(in * out), 1, 0.3f));
  const auto x = randn(static_cast<size_t>(rows * in), 3);
  const auto dy = randn(static_cast<size_t>(rows * out), 4, 0.01f);
  Fp8Recipe sr;
  sr.kind = ScalingKind::Nvfp4;
  const Fp8Recipe nearest = recipe(ScalingKind::Nvfp4);
  const auto a = nvfp4_weight_gradient(lin, sr, x, dy, rows, 7);
  const auto b = nvfp4_weight_gradient(lin, sr, x, dy, rows, 7);
  const auto c = nvfp4_weight_gradient(lin, sr, x, dy, rows, 8);
  const auto n = nvfp4_weight_gradient(lin, nearest, x, dy, rows, 7);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, n);
  // Relative distance to the nearest-rounding gradient: FP4's quantization noise (a step is up
  // to a third of a value), far below 1 for a gradient that is still the gradient.
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - n[i]) * (a[i] - n[i]);
    norm += n[i] * n[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 0.5);
}

}  // namespace
}  // namespace fp8lm
