// TE's Float8BlockScaling quantizers (issue 14): the scale rule at each of its edges (zero,
// Inf and NaN amax, epsilon, a scale that overflows FP32, and rounding down to a power of two
// with one ulp either side of each boundary), each block against a plain re-derivation in
// double and the reference rounding, the 128x128 block serving both GEMM directions, special
// blocks, and every ISA against the scalar twin bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "block_inputs.h"
#include "core/minifloat.h"
#include "fp8/fp8_block_quantize.h"

namespace fp8lm {
namespace {

constexpr float kFltMax = std::numeric_limits<float>::max();

TEST(Fp8BlockScale, EdgesFollowTe) {
  const BlockScalingParams pow2, exact{false, 0.0f};
  for (const auto& p : {pow2, exact}) {
    EXPECT_EQ(fp8_block_scale(0.0f, DType::E4M3, p), 1.0f);
    EXPECT_EQ(fp8_block_scale(INFINITY, DType::E4M3, p), 1.0f);
    EXPECT_EQ(fp8_block_scale(NAN, DType::E4M3, p), 1.0f);
  }
  // 448 / 1e-45 overflows: FLT_MAX, whose power of two below is 2^127.
  EXPECT_EQ(fp8_block_scale(1e-45f, DType::E4M3, exact), kFltMax);
  EXPECT_EQ(fp8_block_scale(1e-45f, DType::E4M3, pow2), std::ldexp(1.0f, 127));
  // An epsilon floors the amax (a zero block then gets max / epsilon).
  EXPECT_EQ(fp8_block_scale(0.0f, DType::E4M3, {false, 0.5f}), 896.0f);
  EXPECT_EQ(fp8_block_scale(2.0f, DType::E4M3, {false, 0.5f}), 224.0f);
  // Without power of two: one FP32 division.
  EXPECT_EQ(fp8_block_scale(3.0f, DType::E5M2, exact), 57344.0f / 3.0f);
}

// Power-of-two scales round down: at amax = max / 2^k the scale is 2^k exactly; one ulp of amax
// above gives a scale just under 2^k, hence 2^(k-1); one ulp below, just over, hence 2^k.
TEST(Fp8BlockScale, PowerOfTwoRoundsDownAtEachBoundary) {
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    for (int k = -100; k <= 100; k += 7) {
      const float at = std::ldexp(fp8_max(f), -k);
      const float s = std::ldexp(1.0f, k);
      EXPECT_EQ(fp8_block_scale(at, f, {}), s) << k;
      EXPECT_EQ(fp8_block_scale(std::nextafter(at, INFINITY), f, {}), s / 2) << k;
      EXPECT_EQ(fp8_block_scale(std::nextafter(at, 0.0f), f, {}), s) << k;
      // Halfway between boundaries: still the power of two below max / amax.
      EXPECT_EQ(fp8_block_scale(at * 0.75f, f, {}), s) << k;
    }
  }
}

// The scale a block must have, derived in double: max / amax (NaN left out), rounded to FP32,
// overflow to FLT_MAX, then the power of two at or below it.
float expected_scale(const std::vector<float>& block, DType f, const BlockScalingParams& p) {
  double amax = 0;
  for (float v : block)
    if (!std::isnan(v)) amax = std::max(amax, std::fabs(static_cast<double>(v)));
  amax = std::max(amax, static_cast<double>(p.amax_epsilon));
  if (amax == 0 || std::isinf(amax)) return 1.0f;
  const double s = static_cast<double>(fp8_max(f)) / amax;
  float scale = s > kFltMax ? kFltMax : static_cast<float>(s);
  if (p.power_2_scale) scale = std::ldexp(1.0f, std::ilogb(scale));
  return scale;
}

// Each block of g against the derivation: its scale_inv is 1 / scale and every code the
// reference rounding (saturating) of x * scale.
void expect_blocks(const std::vector<float>& x, const std::vector<uint8_t>& codes,
                   const std::vector<float>& scale_inv, const BlockGrid& g, DType f,
                   const BlockScalingParams& p) {
  for_each_block(g, [&](int64_t b, int64_t r0, int64_t c0, int64_t nr, int64_t nc) {
    std::vector<float> block;
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t c = c0; c < c0 + nc; ++c)
        block.push_back(x[static_cast<size_t>(r * g.cols + c)]);
    const float scale = expected_scale(block, f, p);
    ASSERT_EQ(scale_inv[static_cast<size_t>(b)], 1.0f / scale) << b;
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t c = c0; c < c0 + nc; ++c) {
        const size_t i = static_cast<size_t>(r * g.cols + c);
        ASSERT_EQ(codes[i], minifloat_encode_reference(x[i] * scale, fp8_spec(f), true)) << i;
      }
  });
}

TEST(Fp8BlockQuantize, EachGridFollowsTheRuleOnShapesNotMultiplesOf128) {
  const int64_t rows = 130, cols = 300;
  const std::vector<float> x = random_tensor(rows * cols, 5);
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    for (const BlockScalingParams& p : {BlockScalingParams{}, BlockScalingParams{false, 1e-3f}}) {
      for (const BlockGrid& g : {fp8_block_rowwise(rows, cols), fp8_block_columnwise(rows, cols),
                                 fp8_block_2d(rows, cols)}) {
        SCOPED_TRACE(std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols));
        std::vector<uint8_t> codes(x.size());
        std::vector<float> scale_inv(static_cast<size_t>(g.blocks()));
        fp8_block_quantize_reference(codes.data(), scale_inv.data(), x.data(), g, f, p);
        expect_blocks(x, codes, scale_inv, g, f, p);
        std::vector<float> y(x.size());
        fp8_block_dequantize(y.data(), codes.data(), scale_inv.data(), g, f);
        EXPECT_EQ(y[299],
                  fp8_decode(codes[299], f) * scale_inv[static_cast<size_t>(g.block_of(0, 299))]);
      }
    }
  }
}

// A weight's 128x128 blocks serve both directions: quantizing the transpose gives the
// transposed codes and scales (a 1x128 activation tile has no such symmetry).
TEST(Fp8BlockQuantize, TwoDimensionalBlocksAreTheSameForTheTranspose) {
  const int64_t rows = 200, cols = 150;
  const std::vector<float> x = random_tensor(rows * cols, 9);
  std::vector<float> xt(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      xt[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  const BlockGrid g = fp8_block_2d(rows, cols), gt = fp8_block_2d(cols, rows);
  std::vector<uint8_t> codes(x.size()), codes_t(x.size());
  std::vector<float> s(static_cast<size_t>(g.blocks())), st(s.size());
  fp8_block_quantize(codes.data(), s.data(), x.data(), g, DType::E4M3, {});
  fp8_block_quantize(codes_t.data(), st.data(), xt.data(), gt, DType::E4M3, {});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(codes[static_cast<size_t>(r * cols + c)],
                codes_t[static_cast<size_t>(c * rows + r)]);
  for (int64_t br = 0; br < g.grid_rows(); ++br)
    for (int64_t bc = 0; bc < g.grid_cols(); ++bc)
      EXPECT_EQ(s[static_cast<size_t>(br * g.grid_cols() + bc)],
                st[static_cast<size_t>(bc * gt.grid_cols() + br)]);
}

// All zeros: scale 1, zero codes. All equal: every value lands on the same code, at most max.
// An outlier sets its block's scale and tiny neighbours flush to zero. Inf: the amax is Inf,
// the scale 1, and the Inf saturates to max. A NaN is left out of the amax and stays NaN.
TEST(Fp8BlockQuantize, SpecialBlocks) {
  const DType f = DType::E4M3;
  std::vector<float> x(5 * kFp8Block, 0.0f);
  for (int64_t i = kFp8Block; i < 2 * kFp8Block; ++i) x[static_cast<size_t>(i)] = 0.3f;
  x[2 * kFp8Block] = 1e30f;
  x[2 * kFp8Block + 1] = 1.0f;
  x[3 * kFp8Block] = -INFINITY;
  x[3 * kFp8Block + 1] = 2.0f;
  x[4 * kFp8Block] = NAN;
  x[4 * kFp8Block + 1] = 3.0f;
  std::vector<uint8_t> codes(x.size());
  std::vector<float> si(5);
  fp8_block_quantize_reference(codes.data(), si.data(), x.data(),
                               fp8_block_rowwise(1, 5 * kFp8Block), f, {});
  EXPECT_EQ(si[0], 1.0f);
  EXPECT_EQ(codes[5], 0x00);
  EXPECT_EQ(si[1], 1.0f / 1024.0f);  // 448 / 0.3 = 1493.3 -> 1024
  for (int64_t i = kFp8Block; i < 2 * kFp8Block; ++i)
    EXPECT_EQ(codes[static_cast<size_t>(i)], codes[kFp8Block]);
  EXPECT_EQ(codes[2 * kFp8Block + 1], 0x00);
  EXPECT_EQ(si[3], 1.0f);
  EXPECT_EQ(codes[3 * kFp8Block], 0xfe);  // -448
  EXPECT_EQ(fp8_decode(codes[3 * kFp8Block + 1], f), 2.0f);
  EXPECT_EQ(si[4], 1.0f / 128.0f);
  EXPECT_TRUE(std::isnan(fp8_decode(codes[4 * kFp8Block], f)));
  EXPECT_EQ(fp8_decode(codes[4 * kFp8Block + 1], f) * si[4], 3.0f);
}

TEST(Fp8BlockQuantize, EveryIsaGivesTheTwinsBits) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{130, 300}, {300, 130}}) {
    const std::vector<float> x = tensor_with_specials(rows, cols, 3, kFp8Block);
    for (const DType f : {DType::E4M3, DType::E5M2}) {
      for (const BlockScalingParams& p : {BlockScalingParams{}, BlockScalingParams{false, 1e-6f}}) {
        for (const BlockGrid& g : {fp8_block_rowwise(rows, cols), fp8_block_columnwise(rows, cols),
                                   fp8_block_2d(rows, cols)}) {
          std::vector<uint8_t> want(x.size()), got(x.size());
          std::vector<float> want_s(static_cast<size_t>(g.blocks())), got_s(want_s.size());
          fp8_block_quantize_reference(want.data(), want_s.data(), x.data(), g, f, p);
          for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(g.block_rows) + "x" +
                         std::to_string(g.block_cols));
            fp8_block_quantize(isa, got.data(), got_s.data(), x.data(), g, f, p);
            EXPECT_EQ(got_s, want_s);
            EXPECT_EQ(got, want);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
