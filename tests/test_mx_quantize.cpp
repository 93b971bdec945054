// MXFP8 quantization (issue 14). The scalar reference twin: each block's E8M0 scale is TE's
// rule (the smallest power of two at or above amax / max), every code is the value's rounding
// after division by it, every decoded value lies within half a step of the format of the input
// (or saturated at max), and the column-wise copy is quantized from the FP32 tensor, not from
// the row-wise one. Special blocks: all zeros, one huge outlier, NaN and Inf, and a last block
// shorter than 32. Then every ISA's quantizer against the twin, bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "block_inputs.h"
#include "core/bf16.h"
#include "core/e8m0.h"
#include "core/minifloat.h"
#include "fp8/mx_quantize.h"

namespace fp8lm {
namespace {

// What a block's scale must be: the smallest power of two at or above amax / max (in double,
// where the division is exact up to one rounding), clamped to E8M0's range. TE multiplies amax
// by 1/max rounded to FP32; the two differ only where amax / max lands within an FP32 rounding
// of a power of two, which these random tensors never do (checked: the test would show it).
uint8_t expected_scale(const std::vector<float>& block, DType f) {
  double amax = 0;
  for (float v : block)
    if (!std::isnan(v)) amax = std::max(amax, std::fabs(static_cast<double>(v)));
  return e8m0_encode_round_up_reference(amax / static_cast<double>(fp8_max(f)));
}

// Each value against its block: the code is the reference rounding of x / scale, and the
// decoded value is within half a step of x (relative 2^-(mantissa bits + 1)), or x / scale
// rounded beyond max and saturated.
void expect_block(const std::vector<float>& block, const uint8_t* codes, int64_t stride,
                  uint8_t scale, DType f) {
  EXPECT_EQ(scale, expected_scale(block, f));
  const double s = std::ldexp(1.0, static_cast<int>(scale) - 127);
  for (size_t i = 0; i < block.size(); ++i) {
    const uint8_t code = codes[static_cast<int64_t>(i) * stride];
    const float scaled = block[i] * e8m0_reciprocal(scale);  // exact: a power of two
    EXPECT_EQ(code, minifloat_encode_reference(scaled, fp8_spec(f), true)) << block[i];
    const double back = static_cast<double>(fp8_decode(code, f)) * s;
    const double x = block[i];
    const double half_step = std::ldexp(std::fabs(x), -fp8_spec(f).man_bits - 1);
    const double smallest = std::ldexp(s, fp8_spec(f).min_normal_exp() - fp8_spec(f).man_bits);
    EXPECT_LE(std::fabs(back - x), std::max(half_step, smallest / 2)) << x;
  }
}

TEST(Mxfp8, RowwiseBlocksFollowTheScaleRuleAndRoundEachValue) {
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    const int64_t rows = 5, cols = 75;  // 32 + 32 + 11
    const std::vector<float> x = random_tensor(rows * cols, 7);
    std::vector<uint8_t> codes(x.size()), scales(static_cast<size_t>(rows * mx_blocks(cols)));
    mxfp8_quantize_rowwise_reference(codes.data(), scales.data(), x.data(), rows, cols, f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < mx_blocks(cols); ++b) {
        const int64_t at = r * cols + b * kMxBlock, n = std::min(kMxBlock, cols - b * kMxBlock);
        const std::vector<float> block(x.begin() + at, x.begin() + at + n);
        expect_block(block, codes.data() + at, 1, scales[static_cast<size_t>(r * 3 + b)], f);
      }
    }
    std::vector<float> y(x.size());
    mxfp8_dequantize_rowwise(y.data(), codes.data(), scales.data(), rows, cols, f);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(y[i], fp8_decode(codes[i], f) *
                          e8m0_decode(scales[(i / cols) * 3 + (i % cols) / kMxBlock]));
  }
}

// Down each column, blocks of 32 rows (70 rows: 32 + 32 + 6). The column-wise copy is made from
// the FP32 values: its codes differ from a transpose of the row-wise copy's wherever a
// column's block has another amax than the row's.
TEST(Mxfp8, ColumnwiseBlocksAreQuantizedFromTheFp32Tensor) {
  const DType f = DType::E4M3;
  const int64_t rows = 70, cols = 40;
  const std::vector<float> x = random_tensor(rows * cols, 11);
  std::vector<uint8_t> codes(x.size()), scales(static_cast<size_t>(mx_blocks(rows) * cols));
  mxfp8_quantize_columnwise_reference(codes.data(), scales.data(), x.data(), rows, cols, f);
  for (int64_t b = 0; b < mx_blocks(rows); ++b) {
    for (int64_t c = 0; c < cols; ++c) {
      std::vector<float> block;
      for (int64_t r = b * kMxBlock; r < std::min(rows, (b + 1) * kMxBlock); ++r)
        block.push_back(x[static_cast<size_t>(r * cols + c)]);
      expect_block(block, codes.data() + b * kMxBlock * cols + c, cols,
                   scales[static_cast<size_t>(b * cols + c)], f);
    }
  }
  std::vector<uint8_t> row_codes(x.size()), row_scales(static_cast<size_t>(rows * 2));
  mxfp8_quantize_rowwise_reference(row_codes.data(), row_scales.data(), x.data(), rows, cols, f);
  EXPECT_NE(codes, row_codes);
  std::vector<float> y(x.size());
  mxfp8_dequantize_columnwise(y.data(), codes.data(), scales.data(), rows, cols, f);
  EXPECT_EQ(y[45 * cols + 3], fp8_decode(codes[45 * cols + 3], f) * e8m0_decode(scales[cols + 3]));
}

// An all-zero block has scale 0x00 and zero codes (TE takes 1 as the reciprocal of that scale);
// one outlier sets the block's scale and small neighbours flush to zero; a NaN is left out of
// the amax and stays NaN; an Inf makes the scale 2^127 and saturates.
TEST(Mxfp8, SpecialBlocks) {
  const DType f = DType::E4M3;
  std::vector<float> x(4 * kMxBlock, 0.0f);
  x[kMxBlock] = 1e30f;     // block 1: an outlier
  x[kMxBlock + 1] = 1.0f;  //   and a value it flushes
  x[2 * kMxBlock] = NAN;   // block 2: NaN beside an ordinary value
  x[2 * kMxBlock + 1] = 3.0f;
  x[3 * kMxBlock] = -INFINITY;  // block 3: Inf
  std::vector<uint8_t> codes(x.size()), scales(4);
  mxfp8_quantize_rowwise_reference(codes.data(), scales.data(), x.data(), 1, 4 * kMxBlock, f);
  EXPECT_EQ(scales[0], 0x00);
  for (int64_t i = 0; i < kMxBlock; ++i) EXPECT_EQ(codes[static_cast<size_t>(i)], 0x00);
  EXPECT_EQ(scales[1], e8m0_encode_round_up_reference(1e30 / 448.0));
  EXPECT_EQ(codes[kMxBlock + 1], 0x00);
  EXPECT_EQ(scales[2], e8m0_encode_round_up_reference(3.0 / 448.0));
  EXPECT_TRUE(std::isnan(fp8_decode(codes[2 * kMxBlock], f)));
  EXPECT_EQ(fp8_decode(codes[2 * kMxBlock + 1], f) * e8m0_decode(scales[2]), 3.0f);
  EXPECT_EQ(scales[3], 0xfe);
  EXPECT_EQ(codes[3 * kMxBlock], 0xfe);  // -448: saturated
}

// Every ISA this CPU runs gives the twin's scales and codes bit for bit, both copies, both
// formats: random values over many binades with zeros, NaN, ±Inf, subnormals and an outlier
// sprinkled in, on shapes whose rows and columns are not multiples of 32.
TEST(Mxfp8, EveryIsaGivesTheTwinsBits) {
  const std::vector<float> x = tensor_with_specials(37, 70, 3);
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 70}, {70, 37}}) {
      std::vector<uint8_t> want(x.size()), got(x.size());
      std::vector<uint8_t> want_s(static_cast<size_t>(rows * mx_blocks(cols))),
          got_s(want_s.size());
      std::vector<uint8_t> want_c(x.size()), got_c(x.size());
      std::vector<uint8_t> want_cs(static_cast<size_t>(mx_blocks(rows) * cols)),
          got_cs(want_cs.size());
      mxfp8_quantize_rowwise_reference(want.data(), want_s.data(), x.data(), rows, cols, f);
      mxfp8_quantize_columnwise_reference(want_c.data(), want_cs.data(), x.data(), rows, cols, f);
      for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_short_name(f)));
        mxfp8_quantize_rowwise(isa, got.data(), got_s.data(), x.data(), rows, cols, f);
        EXPECT_EQ(got_s, want_s);
        EXPECT_EQ(got, want);
        mxfp8_quantize_columnwise(isa, got_c.data(), got_cs.data(), x.data(), rows, cols, f);
        EXPECT_EQ(got_cs, want_cs);
        EXPECT_EQ(got_c, want_c);
      }
    }
  }
}

// mxfp8_quantize_to_bf16 of x on grid g, with and without codes, against the twin: the
// reference scales (and codes where kept), and each operand value the BF16 of decode(code) x
// 2^(scale - 127), rounded as bf16_from_float rounds it (NaN any NaN).
void expect_operand_cast(const std::vector<float>& x, const BlockGrid& g, DType f) {
  std::vector<uint8_t> want(x.size()), want_s(static_cast<size_t>(g.blocks()));
  if (g.block_rows == 1) {
    mxfp8_quantize_rowwise_reference(want.data(), want_s.data(), x.data(), g.rows, g.cols, f);
  } else {
    mxfp8_quantize_columnwise_reference(want.data(), want_s.data(), x.data(), g.rows, g.cols, f);
  }
  for (const bool keep_codes : {true, false}) {
    std::vector<uint8_t> codes(x.size(), 0xaa), scales(want_s.size());
    std::vector<bf16_t> operand(x.size());
    mxfp8_quantize_to_bf16(keep_codes ? codes.data() : nullptr, scales.data(), operand.data(),
                           x.data(), g, f);
    ASSERT_EQ(scales, want_s);
    if (keep_codes) {
      ASSERT_EQ(codes, want);
    }
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto i = static_cast<size_t>(r * g.cols + c);
        const float v =
            fp8_decode(want[i], f) * e8m0_decode(want_s[static_cast<size_t>(g.block_of(r, c))]);
        if (std::isnan(v)) {
          ASSERT_TRUE(std::isnan(bf16_to_float(operand[i]))) << r << "," << c;
        } else {
          ASSERT_EQ(operand[i], bf16_from_float(v))
              << r << "," << c << (keep_codes ? " codes" : "");
        }
      }
  }
}

// The GEMM operand cast (mxfp8_quantize_to_bf16: one pass over registers on AVX-512, with or
// without the codes) against the twin: the reference codes and scales, and each operand value
// the BF16 of decode(code) x 2^(scale - 127) (rounded where it falls below BF16's normals, as
// the cast rounds it). Specials: zero blocks (scale 0, multiplier 1), subnormal amaxes either
// side of 2^-127 x max, NaN, ±Inf (scale 0xFE, multiplier 2^-127), an outlier; rows longer
// than sixteen blocks, shapes that are not multiples of 32, and rows of whole blocks (cast as one
// run of blocks: 37 x 256, eight a row, batches of sixteen across rows).
TEST(Mxfp8, OperandCastGivesTheTwinsBitsWithOrWithoutCodes) {
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{37, 70}, {70, 37}, {33, 600}, {64, 48}, {37, 256}}) {
    std::vector<float> x = tensor_with_specials(rows, cols, 9);
    // Blocks (of a row, and of a column) whose amax x 1/max lands on E8M0's subnormal edge:
    // just below, at and just above 2^-127 (to code 0, 0 and 1), then a zero block.
    const auto rcp = static_cast<float>(1.0 / 448.0);
    std::vector<float> edge;
    for (float a = std::bit_cast<float>(0x3ffff0u) / rcp; a < 0x1p-117f && edge.size() < 3;
         a = std::nextafter(a, 1.0f)) {
      const uint32_t bits = std::bit_cast<uint32_t>(a * rcp);
      if (bits == 0x3fffffu + edge.size()) edge.push_back(a);
    }
    ASSERT_EQ(edge.size(), 3u);
    edge.push_back(0.0f);
    for (size_t k = 0; k < edge.size(); ++k) {
      for (int64_t j = 0; j < kMxBlock; ++j) {
        const int64_t c = static_cast<int64_t>(k) * kMxBlock + j,
                      r = static_cast<int64_t>(k) * kMxBlock + j;
        if (c < cols) x[static_cast<size_t>(rows / 2 * cols + c)] = j == 0 ? edge[k] : 0.0f;
        if (r < rows) x[static_cast<size_t>(r * cols + cols / 2)] = j == 0 ? edge[k] : 0.0f;
      }
    }
    for (const DType f : {DType::E4M3, DType::E5M2}) {
      for (const BlockGrid& g :
           {BlockGrid{rows, cols, 1, kMxBlock}, BlockGrid{rows, cols, kMxBlock, 1}}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " +
                     std::string(dtype_short_name(f)) +
                     (g.block_rows == 1 ? " rowwise" : " columnwise"));
        expect_operand_cast(x, g, f);
      }
    }
  }
}

// Blocks whose scales run from 2^-127 up past the smallest at which each product of a value and
// the scale is a normal float (min_exact_bf16_scale: there the cast stores the products' top
// halves), each holding every magnitude the format has: below it, the products that fall
// among BF16's subnormals with bits it cannot hold are rounded as the twin rounds them.
TEST(Mxfp8, OperandOfTinyScalesIsRoundedWhereBf16CannotHoldIt) {
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    const int top = fp8_spec(f).exp_bits == 4 ? 0x7e : 0x7b;  // the largest finite code
    const int64_t n = 40;                                     // scales 2^-127 .. 2^-88
    std::vector<float> rows_x(static_cast<size_t>(n * kMxBlock)), cols_x(rows_x.size());
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < kMxBlock; ++j) {
        const int code = j == 0 ? top : 1 + static_cast<int>(j * (top - 1) / kMxBlock);
        const float v =
            std::ldexp(fp8_decode(static_cast<uint8_t>(code), f), static_cast<int>(k) - 127) *
            (j % 2 ? -1.0f : 1.0f);
        rows_x[static_cast<size_t>(k * kMxBlock + j)] = v;
        cols_x[static_cast<size_t>(j * n + k)] = v;
      }
    for (const BlockGrid& g :
         {BlockGrid{n, kMxBlock, 1, kMxBlock}, BlockGrid{kMxBlock, n, kMxBlock, 1}}) {
      SCOPED_TRACE(std::string(dtype_short_name(f)) +
                   (g.block_rows == 1 ? " rowwise" : " columnwise"));
      expect_operand_cast(g.block_rows == 1 ? rows_x : cols_x, g, f);
    }
  }
}

}  // namespace
}  // namespace fp8lm
