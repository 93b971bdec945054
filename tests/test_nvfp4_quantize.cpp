// NVFP4 quantizers (issue 14): the global and block scale rules re-derived independently, each
// grid (1x16, 16x1, 16x16) against them and the reference rounding, special blocks, stochastic
// rounding (exact on the grid, unbiased, reproducible, addressed by position), the random
// Hadamard transform (fast = twin bit for bit, = the matrix product within FP32 summation
// error, and leaves dyᵀ·x unchanged), and every ISA against the scalar twin.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "block_inputs.h"
#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "core/fp8_dtype.h"
#include "core/minifloat.h"
#include "fp8/hadamard.h"
#include "fp8/nvfp4_quantize.h"

namespace fp8lm {
namespace {

float tensor_amax(const std::vector<float>& x) {
  float a = 0.0f;
  for (float v : x) a = std::fmax(a, std::fabs(v));
  return a;
}

TEST(Nvfp4Scale, GlobalScaleEdges) {
  EXPECT_EQ(nvfp4_global_encode_scale(0.0f), 1.0f);
  EXPECT_EQ(nvfp4_global_encode_scale(INFINITY), 1.0f);        // 2688 / Inf = 0 -> 1
  EXPECT_EQ(nvfp4_global_encode_scale(1e-40f), FLT_MAX);       // overflows: capped
  EXPECT_EQ(nvfp4_global_encode_scale(2688.0f), 1.0f);         // 448 * 6
  EXPECT_EQ(nvfp4_global_encode_scale(3.0f), 2688.0f / 3.0f);  // one FP32 division
}

// Each block against the rules written out again: b = E4M3(amax * (S * (1/6))) by the
// reference rounding (saturating), codes the reference E2M1 rounding of x * min(1 / (b / S),
// FLT_MAX).
void expect_blocks(const std::vector<float>& x, const std::vector<uint8_t>& codes,
                   const std::vector<uint8_t>& scales, const BlockGrid& g, float global_amax) {
  const float s = nvfp4_global_encode_scale(global_amax);
  for_each_block(g, [&](int64_t b, int64_t r0, int64_t c0, int64_t nr, int64_t nc) {
    float amax = 0.0f;
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t c = c0; c < c0 + nc; ++c)
        amax = std::fmax(amax, std::fabs(x[static_cast<size_t>(r * g.cols + c)]));
    const auto block = static_cast<uint8_t>(
        minifloat_encode_reference(amax * (s * (1.0f / 6.0f)), fp8_spec(Fp8Format::E4M3), true));
    ASSERT_EQ(scales[static_cast<size_t>(b)], block) << b;
    const float m = std::fmin(1.0f / (fp8_decode(block, Fp8Format::E4M3) * (1.0f / s)), FLT_MAX);
    for (int64_t r = r0; r < r0 + nr; ++r)
      for (int64_t c = c0; c < c0 + nc; ++c) {
        const size_t i = static_cast<size_t>(r * g.cols + c);
        ASSERT_EQ(codes[i], minifloat_encode_reference(x[i] * m, kE2M1Spec, true)) << i;
      }
  });
}

TEST(Nvfp4Quantize, EachGridFollowsTheRulesOnShapesNotMultiplesOf16) {
  const int64_t rows = 37, cols = 70;
  const std::vector<float> x = random_tensor(rows * cols, 5, 2.0f);
  const float amax = tensor_amax(x);
  for (const BlockGrid& g :
       {nvfp4_rowwise(rows, cols), nvfp4_columnwise(rows, cols), nvfp4_2d(rows, cols)}) {
    SCOPED_TRACE(std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols));
    std::vector<uint8_t> codes(x.size()), scales(static_cast<size_t>(g.blocks()));
    nvfp4_quantize_reference(codes.data(), scales.data(), x.data(), g, amax);
    expect_blocks(x, codes, scales, g, amax);
    // Dequantized values are within half an E2M1 step of the block's scaled grid, or the
    // block's largest magnitude (6 · b / S) saturated.
    std::vector<float> y(x.size());
    nvfp4_dequantize(y.data(), codes.data(), scales.data(), g, amax);
    for (size_t i = 0; i < x.size(); ++i) {
      const float unit =
          Nvfp4BlockScales{nvfp4_global_encode_scale(amax),
                           scales[static_cast<size_t>(g.block_of(static_cast<int64_t>(i) / cols,
                                                                 static_cast<int64_t>(i) % cols))]}
              .decode();
      EXPECT_EQ(y[i], e2m1_decode(codes[i]) * unit);
      EXPECT_LE(
          std::fabs(y[i] - x[i]),
          std::max(std::fabs(x[i]) * 0.25f + unit * 0.25f, std::fabs(x[i]) - 6 * unit) * 1.0001f)
          << i;
    }
  }
}

// All zeros: block scale 0 and zero codes. All equal: one code for all. An outlier makes small
// neighbours flush. NaN: left out of the amax, coded as the largest magnitude (the block scale
// cannot carry it here). Inf: the global amax is Inf, S is 1, the block scale saturates at 448
// and the Inf at 6.
TEST(Nvfp4Quantize, SpecialBlocks) {
  std::vector<float> x(5 * kNvfp4Block, 0.0f);
  for (int64_t i = 16; i < 32; ++i) x[static_cast<size_t>(i)] = 0.3f;
  x[32] = 1e6f;
  x[33] = 1.0f;
  x[48] = NAN;
  x[49] = -3.0f;
  std::vector<uint8_t> codes(x.size()), scales(5);
  const float amax = tensor_amax(x);  // 1e6: NaN left out
  nvfp4_quantize_reference(codes.data(), scales.data(), x.data(), nvfp4_rowwise(1, 80), amax);
  EXPECT_EQ(scales[0], 0x00);
  EXPECT_EQ(codes[3], 0x0);
  for (int64_t i = 16; i < 32; ++i) EXPECT_EQ(codes[static_cast<size_t>(i)], codes[16]);
  EXPECT_EQ(codes[32], 0x7);
  EXPECT_EQ(codes[33], 0x0);
  EXPECT_EQ(codes[48], 0x7);
  EXPECT_EQ(codes[49] & 0x8, 0x8);
  x[64] = -INFINITY;
  nvfp4_quantize_reference(codes.data(), scales.data(), x.data(), nvfp4_rowwise(1, 80), INFINITY);
  EXPECT_EQ(scales[4], 0x7e);  // 448
  EXPECT_EQ(codes[64], 0xf);   // -6
}

// Stochastic rounding: values on the grid never move; between neighbours the share rounding up
// is (a - lo) / (hi - lo) (binomial: 4 sigma over 40,000 draws is under 1%), so the mean is the
// value; and the draw belongs to the element's place, not to how a call splits the tensor.
TEST(Nvfp4StochasticRounding, ExactOnTheGridUnbiasedBetweenAndAddressedByPosition) {
  const uint32_t key = counter_key(1234);
  for (const float v : {0.0f, 0.5f, 1.5f, 3.0f, -4.0f, 6.0f, 1e9f})
    for (uint32_t i = 0; i < 1000; ++i)
      ASSERT_EQ(e2m1_encode_stochastic(v, counter_bits(key, i)), e2m1_encode(v)) << v;
  for (const float v : {0.1f, 0.8f, 1.2f, 2.25f, 3.9f, -5.5f}) {
    const int n = 40000;
    std::vector<float> x(n, v);
    std::vector<uint8_t> codes(n);
    e2m1_quantize(Isa::Scalar, codes.data(), x.data(), n, 1.0f, &key);
    double sum = 0;
    for (uint8_t c : codes) sum += e2m1_decode(c);
    const double mean = sum / n;
    EXPECT_NEAR(mean, v, 0.01 * std::fabs(v) + 0.005) << v;
  }
  std::vector<float> x = random_tensor(100, 8, 1.0f);
  std::vector<uint8_t> whole(100), split(100), other(100);
  e2m1_quantize(Isa::Scalar, whole.data(), x.data(), 100, 1.0f, &key, 0);
  e2m1_quantize(Isa::Scalar, split.data(), x.data(), 37, 1.0f, &key, 0);
  e2m1_quantize(Isa::Scalar, split.data() + 37, x.data() + 37, 63, 1.0f, &key, 37);
  EXPECT_EQ(split, whole);
  const uint32_t other_key = counter_key(1235);
  e2m1_quantize(Isa::Scalar, other.data(), x.data(), 100, 1.0f, &other_key, 0);
  EXPECT_NE(other, whole);
}

TEST(Nvfp4Quantize, EveryIsaGivesTheTwinsBits) {
  const uint32_t key = counter_key(99);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 70}, {70, 37}}) {
    const std::vector<float> x = tensor_with_specials(rows, cols, 3, kNvfp4Block);
    for (const float amax : {tensor_amax(x), 12.5f, INFINITY}) {
      for (const uint32_t* sr : {static_cast<const uint32_t*>(nullptr), &key}) {
        for (const BlockGrid& g :
             {nvfp4_rowwise(rows, cols), nvfp4_columnwise(rows, cols), nvfp4_2d(rows, cols)}) {
          std::vector<uint8_t> want(x.size()), got(x.size());
          std::vector<uint8_t> want_s(static_cast<size_t>(g.blocks())), got_s(want_s.size());
          nvfp4_quantize_reference(want.data(), want_s.data(), x.data(), g, amax, sr);
          for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            SCOPED_TRACE(std::string(isa_name(isa)) + (sr ? " sr " : " rn ") +
                         std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols) +
                         " amax " + std::to_string(amax));
            nvfp4_quantize(isa, got.data(), got_s.data(), x.data(), g, amax, sr);
            EXPECT_EQ(got_s, want_s);
            EXPECT_EQ(got, want);
          }
        }
      }
    }
  }
}

// The transform is the matrix product v · diag(s) · H16 / 4 up to FP32 summation error (four
// butterfly stages: at most 4 roundings of partial sums, each within 2^-24 of the sum of the
// magnitudes, so |error| <= 4 · 2^-24 · Σ|v_i| / 4), the fast and reference versions agree bit
// for bit, and rotating both dy and x keeps dyᵀ·x (orthogonal: M · Mᵀ = I).
TEST(Rht16, MatchesTheMatrixProductAndKeepsTheWeightGradient) {
  const int64_t rows = 48, cols = 37, outs = 5;
  const std::vector<float> x = random_tensor(rows * cols, 21, 1.0f);
  std::vector<float> y(x.size()), y_ref(x.size());
  rht16_rows(y.data(), x.data(), rows, cols);
  rht16_rows_reference(y_ref.data(), x.data(), rows, cols);
  EXPECT_EQ(y, y_ref);
  for (int64_t g = 0; g < rows; g += 16)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = 0; j < 16; ++j) {
        double want = 0, mag = 0;
        for (int64_t i = 0; i < 16; ++i) {
          const double h = (__builtin_popcountll(static_cast<uint64_t>(i & j)) % 2) ? -1.0 : 1.0;
          const double v = x[static_cast<size_t>((g + i) * cols + c)];
          want += v * kRhtSigns[static_cast<size_t>(i)] * h / 4;
          mag += std::fabs(v) / 4;
        }
        ASSERT_NEAR(y[static_cast<size_t>((g + j) * cols + c)], want, 4 * 0x1p-24 * mag * 1.001);
      }
  const std::vector<float> dy = random_tensor(rows * outs, 22, 1.0f);
  std::vector<float> dy_rot(dy.size());
  rht16_rows(dy_rot.data(), dy.data(), rows, outs);
  for (int64_t o = 0; o < outs; ++o)
    for (int64_t c = 0; c < cols; ++c) {
      double plain = 0, rotated = 0, mag = 0;
      for (int64_t r = 0; r < rows; ++r) {
        plain += static_cast<double>(dy[static_cast<size_t>(r * outs + o)]) *
                 x[static_cast<size_t>(r * cols + c)];
        rotated += static_cast<double>(dy_rot[static_cast<size_t>(r * outs + o)]) *
                   y[static_cast<size_t>(r * cols + c)];
        mag += std::fabs(static_cast<double>(dy[static_cast<size_t>(r * outs + o)]) *
                         x[static_cast<size_t>(r * cols + c)]);
      }
      // Both factors carry the transform's rounding (relative 2^-22 of their group's magnitude).
      EXPECT_NEAR(rotated, plain, 1e-5 * mag + 1e-6);
    }
}

}  // namespace
}  // namespace fp8lm
