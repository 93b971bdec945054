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
#include "core/bf16.h"
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
        minifloat_encode_reference(amax * (s * (1.0f / 6.0f)), fp8_spec(DType::E4M3), true));
    ASSERT_EQ(scales[static_cast<size_t>(b)], block) << b;
    const float m = std::fmin(1.0f / (fp8_decode(block, DType::E4M3) * (1.0f / s)), FLT_MAX);
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

// The GEMM operand cast (nvfp4_quantize_to_bf16: one pass over registers on AVX-512, with or
// without the codes, the transform applied on the fly) against the twins: the reference
// quantizer of the (reference-)transformed tensor, each value decoded times its block scale.
// Stripes start mid-tensor (first_index) so the draws' addresses are checked too.
void expect_operand_cast_matches_twins(const std::vector<float>& x, const BlockGrid& g, float amax,
                                       const uint32_t* sr, bool rht, int64_t first_index) {
  const auto n = static_cast<size_t>(g.rows * g.cols);
  std::vector<float> src = x;
  if (rht) rht16_rows_reference(src.data(), x.data(), g.rows, g.cols);
  std::vector<uint8_t> want(n), want_s(static_cast<size_t>(g.blocks()));
  nvfp4_quantize_reference(want.data(), want_s.data(), src.data(), g, amax, sr, first_index);
  for (const bool keep_codes : {true, false}) {
    SCOPED_TRACE(keep_codes ? "with codes" : "operand only");
    std::vector<uint8_t> codes(n, 0xff), scales(want_s.size());
    std::vector<bf16_t> operand(n);
    nvfp4_quantize_to_bf16(keep_codes ? codes.data() : nullptr, scales.data(), operand.data(),
                           x.data(), g, amax, sr, first_index, rht);
    ASSERT_EQ(scales, want_s);
    if (keep_codes) {
      ASSERT_EQ(codes, want);
    }
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto i = static_cast<size_t>(r * g.cols + c);
        const float b = fp8_decode(want_s[static_cast<size_t>(g.block_of(r, c))], DType::E4M3);
        ASSERT_EQ(bf16_to_float(operand[i]), e2m1_decode(want[i]) * b) << r << "," << c;
      }
  }
}

TEST(Nvfp4Quantize, OperandCastGivesTheTwinsBitsWithOrWithoutCodes) {
  const uint32_t key = counter_key(41);
  // Shapes with short last blocks, a row longer than 16 blocks, stripes of 16 rows, and rows of
  // whole blocks (cast as one run of blocks, batches of sixteen across rows: 37 x 48).
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{37, 70}, {48, 37}, {16, 300}, {32, 256}, {37, 48}}) {
    const std::vector<float> specials = tensor_with_specials(rows, cols, 5, kNvfp4Block);
    // The Hadamard transform's NaN payloads depend on the compiler's operand order, so its
    // inputs keep Inf (whose differences make NaNs) but no NaN.
    std::vector<float> finite = specials;
    for (float& v : finite) {
      if (std::isnan(v)) v = 1.0f;
    }
    for (const uint32_t* sr : {static_cast<const uint32_t*>(nullptr), &key}) {
      for (const BlockGrid& g :
           {nvfp4_rowwise(rows, cols), nvfp4_columnwise(rows, cols), nvfp4_2d(rows, cols)}) {
        for (const bool rht : {false, true}) {
          if (rht && (g.block_cols != 1 || rows % 16 != 0)) continue;
          const std::vector<float>& x = rht ? finite : specials;
          SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (sr ? " sr " : " rn ") +
                       std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols) +
                       (rht ? " rht" : ""));
          expect_operand_cast_matches_twins(x, g, tensor_amax(x), sr, rht, 1000);
          expect_operand_cast_matches_twins(x, g, 2.5f, sr, rht, 0);
        }
      }
    }
  }
}

// Every rounding boundary of E2M1, both ways: with the tensor amax 2688 (S = 1) and a 6 in every
// block (block scale 1, multiplier 1), the values reach the encoder unscaled.
TEST(Nvfp4Quantize, OperandCastRoundsEveryBoundaryAsTheTwin) {
  std::vector<float> edges;
  for (const float b : {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f,
                        5.0f, 6.0f, 6.5f, 7.0f, 8.0f}) {
    for (const float v : {std::nextafter(b, 0.0f), b, std::nextafter(b, 10.0f)}) {
      edges.push_back(v);
      edges.push_back(-v);
    }
  }
  for (const float v : {0.0f, -0.0f, FLT_TRUE_MIN, -1e-39f, 1e-30f, FLT_MAX, -FLT_MAX, NAN, -NAN})
    edges.push_back(v);
  const int64_t rows = 32, cols = 48;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = edges[i % edges.size()];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (r % 16 == 0 || c % 16 == 0) x[static_cast<size_t>(r * cols + c)] = 6.0f;
  const uint32_t key = counter_key(3);
  for (const uint32_t* sr : {static_cast<const uint32_t*>(nullptr), &key}) {
    for (const BlockGrid& g : {nvfp4_rowwise(rows, cols), nvfp4_columnwise(rows, cols)}) {
      SCOPED_TRACE(std::string(sr ? "sr " : "rn ") + std::to_string(g.block_rows) + "x" +
                   std::to_string(g.block_cols));
      expect_operand_cast_matches_twins(x, g, 2688.0f, sr, false, 7);
    }
  }
}

// Stochastic rounding between every pair of neighbouring E2M1 values and beyond 6: magnitudes
// on a 1/1024 grid from 0 to 8, each at many positions (so with many draws), unscaled as above.
// The operand cast finds lo, the step and p by the binade's exponent where the twin looks them
// up by the code; every fraction of every step must land the same way.
TEST(Nvfp4Quantize, StochasticOperandCastSplitsEveryStepAsTheTwin) {
  const int64_t rows = 64, cols = 1024;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = static_cast<float>(i % 8192) / 1024.0f;
    x[i] = (i / 8192) % 2 ? -v : v;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (r % 16 == 0 || c % 16 == 0) x[static_cast<size_t>(r * cols + c)] = 6.0f;
  const uint32_t key = counter_key(17);
  for (const BlockGrid& g : {nvfp4_rowwise(rows, cols), nvfp4_columnwise(rows, cols)})
    expect_operand_cast_matches_twins(x, g, 2688.0f, &key, false, 11);
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

// The amax of the transform kept in registers equals the amax of the written transform, at
// column counts that leave every tail of an 8- and 16-wide run, with a NaN left out; the
// plain amax taken beside it, absmax's.
TEST(Rht16, AbsmaxEqualsTheAbsmaxOfTheWrittenTransform) {
  const int64_t rows = 32;
  // Values of about 2^-130 too: the transforms' quarters are subnormal and round, so the 1/4
  // must come after the butterflies (the AVX-512 amax takes it once, on the largest unscaled
  // value; quartering the inputs first fails here).
  for (const float tiny : {1.0f, 0x1p-130f})
    for (const int64_t cols : {1, 7, 8, 9, 16, 37}) {
      std::vector<float> x = random_tensor(rows * cols, 23, 3.0f);
      for (float& v : x) v *= tiny;
      for (const bool nan : {false, true}) {
        if (nan) x[static_cast<size_t>(17 * cols)] = std::nanf("");
        std::vector<float> y(x.size());
        rht16_rows_reference(y.data(), x.data(), rows, cols);
        float want = 0.0f;
        for (const float v : y) want = std::fmax(want, std::fabs(v));
        EXPECT_EQ(rht16_absmax(x.data(), rows, cols), want)
            << "cols " << cols << " nan " << nan << " tiny " << tiny;
        float plain = -1.0f, want_plain = 0.0f;
        for (const float v : x) want_plain = std::fmax(want_plain, std::fabs(v));
        EXPECT_EQ(rht16_absmax(x.data(), rows, cols, &plain), want)
            << "cols " << cols << " nan " << nan;
        EXPECT_EQ(plain, want_plain) << "cols " << cols << " nan " << nan;
      }
    }
}

}  // namespace
}  // namespace fp8lm
