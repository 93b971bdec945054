// The block cast a GEMM operand goes through (fp8/block_cast.h): split over threads in stripes,
// it gives the reference twins' codes and scales for the whole tensor (stochastic rounding and
// the Hadamard transform included), and its BF16 operand is each code decoded times its block
// scale, exactly (the product is representable, so rounding it to BF16 changes nothing).
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "block_inputs.h"
#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "core/e8m0.h"
#include "fp8/block_cast.h"
#include "fp8/block_stats.h"
#include "fp8/hadamard.h"
#include "fp8/mx_quantize.h"
#include "fp8/nvfp4_quantize.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

TEST(BlockCast, StripesOverThreadsGiveTheTwinsBitsAndAnExactOperand) {
  const int64_t rows = 304, cols = 400;  // several stripes for every grid; rows % 16 == 0
  std::vector<float> x = random_tensor(rows * cols, 17, 2.0f);
  const auto n = static_cast<size_t>(rows * cols);
  omp_set_num_threads(2);
  struct Case {
    BlockScheme scheme;
    int64_t br, bc;
    bool rht, sr;
  };
  const Case cases[] = {{BlockScheme::Mxfp8, 1, 32, false, false},
                        {BlockScheme::Mxfp8, 32, 1, false, false},
                        {BlockScheme::Fp8Block, 1, 128, false, false},
                        {BlockScheme::Fp8Block, 128, 1, false, false},
                        {BlockScheme::Fp8Block, 128, 128, false, false},
                        {BlockScheme::Nvfp4, 1, 16, false, true},
                        {BlockScheme::Nvfp4, 16, 1, true, true},
                        {BlockScheme::Nvfp4, 16, 16, false, false}};
  for (const Case& k : cases) {
    SCOPED_TRACE(std::to_string(static_cast<int>(k.scheme)) + " " + std::to_string(k.br) + "x" +
                 std::to_string(k.bc));
    BlockCast c;
    c.scheme = k.scheme;
    c.grid = {rows, cols, k.br, k.bc};
    c.rht = k.rht;
    c.stochastic_rounding = k.sr;
    c.sr_key = counter_key(5);
    std::vector<uint8_t> codes(n), scales(block_scale_bytes(c));
    std::vector<bf16_t> operand(n);
    std::vector<float> work(n);
    float tensor_scale_inv = 0;
    block_cast(c, {codes.data(), scales.data(), operand.data(), &tensor_scale_inv, nullptr},
               x.data(), work.data());

    std::vector<uint8_t> want(n), want_scales(scales.size());
    std::vector<float> decoded(n);
    if (k.scheme == BlockScheme::Mxfp8) {
      if (k.bc == 1)
        mxfp8_quantize_columnwise_reference(want.data(), want_scales.data(), x.data(), rows, cols,
                                            DType::E4M3);
      else
        mxfp8_quantize_rowwise_reference(want.data(), want_scales.data(), x.data(), rows, cols,
                                         DType::E4M3);
      for (size_t i = 0; i < n; ++i)
        decoded[i] = fp8_decode(want[i], DType::E4M3) *
                     e8m0_decode(want_scales[static_cast<size_t>(c.grid.block_of(
                         static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols))]);
      EXPECT_EQ(tensor_scale_inv, 1.0f);
    } else if (k.scheme == BlockScheme::Fp8Block) {
      std::vector<float> s(static_cast<size_t>(c.grid.blocks()));
      fp8_block_quantize_reference(want.data(), s.data(), x.data(), c.grid, DType::E4M3, {});
      std::memcpy(want_scales.data(), s.data(), want_scales.size());
      for (size_t i = 0; i < n; ++i)
        decoded[i] = fp8_decode(want[i], DType::E4M3) *
                     s[static_cast<size_t>(c.grid.block_of(static_cast<int64_t>(i) / cols,
                                                           static_cast<int64_t>(i) % cols))];
    } else {
      std::vector<float> src = x;
      if (k.rht) rht16_rows_reference(src.data(), x.data(), rows, cols);
      float amax = 0;
      for (float v : src) amax = std::fmax(amax, std::fabs(v));
      nvfp4_quantize_reference(want.data(), want_scales.data(), src.data(), c.grid, amax,
                               k.sr ? &c.sr_key : nullptr);
      for (size_t i = 0; i < n; ++i)
        decoded[i] =
            e2m1_decode(want[i]) *
            fp8_decode(want_scales[static_cast<size_t>(c.grid.block_of(
                           static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols))],
                       DType::E4M3);
      EXPECT_EQ(tensor_scale_inv, 1.0f / nvfp4_global_encode_scale(amax));
    }
    EXPECT_EQ(codes, want);
    EXPECT_EQ(scales, want_scales);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bf16_to_float(operand[i]), decoded[i]) << i;
  }
}

// A cast that keeps no codes (the CPU's, whose GEMMs read only the BF16 operand) may take its
// own path (Float8BlockScaling's row-wise blocks: sixteen blocks' scales at once): its operand
// and scales are those of the cast that keeps the codes, for every grid of every scheme, on
// blocks of specials (NaN, Inf, zeros, subnormals, FP32's largest) and a last block cut short;
// Float8BlockScaling also with an amax_epsilon above some blocks' amaxes.
TEST(BlockCast, ACastWithoutCodesGivesTheOperandOfOneWithThem) {
  const int64_t rows = 96, cols = 300;  // cols: 2 blocks of 128 and a short one
  const std::vector<float> x = tensor_with_specials(rows, cols, 29, kFp8Block);
  const auto n = static_cast<size_t>(rows * cols);
  std::vector<float> work(n);
  for (const auto& [kind, epsilon] : {std::pair{ScalingKind::Block, 0.0f},
                                      {ScalingKind::Block, 4.0f},
                                      {ScalingKind::Mxfp8, 0.0f},
                                      {ScalingKind::Nvfp4, 0.0f}}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    recipe.block.amax_epsilon = epsilon;
    for (const BlockRole role : {BlockRole::Input, BlockRole::Weight, BlockRole::GradOutput}) {
      for (const bool columnwise : {false, true}) {
        SCOPED_TRACE(std::string(scaling_kind_name(kind)) + " epsilon " + std::to_string(epsilon) +
                     " role " + std::to_string(static_cast<int>(role)) +
                     (columnwise ? " columnwise" : ""));
        const BlockCast c = recipe_block_cast(recipe, role, columnwise, rows, cols);
        std::vector<uint8_t> codes(n), scales(block_scale_bytes(c)), scales_alone(scales.size());
        std::vector<bf16_t> operand(n), operand_alone(n);
        float tsi = 0, tsi_alone = 0;
        block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi, nullptr}, x.data(),
                   work.data());
        block_cast(c, {nullptr, scales_alone.data(), operand_alone.data(), &tsi_alone, nullptr},
                   x.data(), work.data());
        EXPECT_EQ(scales_alone, scales);
        EXPECT_EQ(operand_alone, operand);
        EXPECT_EQ(tsi_alone, tsi);
      }
    }
  }
}

// The same for Float8BlockScaling on blocks whose amaxes run from FP32's subnormals up to
// 2^-100 (the block scale's inverse from 2^-127 up), each holding values of every binade below
// its amax, row-wise, column-wise and 128x128: where a decoded value times the inverse falls
// among BF16's subnormals with bits BF16 cannot hold, the cast without codes rounds it as the
// one with them does.
TEST(BlockCast, ACastWithoutCodesRoundsProductsOfTinyScales) {
  const int64_t rows = 256, cols = 2 * kFp8Block;  // 4 x 128x128 blocks
  std::vector<float> x = random_tensor(rows * cols, 31, 1.0f);
  for (int64_t b = 0; b < rows * cols / kFp8Block; ++b) {
    const int top = -149 + static_cast<int>(b) * 49 / static_cast<int>(rows * cols / kFp8Block);
    for (int64_t j = 0; j < kFp8Block; ++j) {
      float& v = x[static_cast<size_t>(b * kFp8Block + j)];
      v = std::ldexp(std::fmod(std::fabs(v), 1.0f), top - static_cast<int>(j % 24));
      if (j % 3 == 0) v = -v;
    }
  }
  Fp8Recipe recipe;
  recipe.kind = ScalingKind::Block;
  for (const auto& [role, columnwise] : {std::pair{BlockRole::Input, false},
                                         {BlockRole::GradOutput, false},
                                         {BlockRole::Input, true},
                                         {BlockRole::Weight, false}}) {
    SCOPED_TRACE(std::to_string(static_cast<int>(role)) + (columnwise ? " columnwise" : ""));
    const BlockCast c = recipe_block_cast(recipe, role, columnwise, rows, cols);
    const auto n = static_cast<size_t>(rows * cols);
    std::vector<uint8_t> codes(n), scales(block_scale_bytes(c)), scales_alone(scales.size());
    std::vector<bf16_t> operand(n), operand_alone(n);
    std::vector<float> work(n);
    float tsi = 0;
    block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi, nullptr}, x.data(),
               work.data());
    block_cast(c, {nullptr, scales_alone.data(), operand_alone.data(), &tsi, nullptr}, x.data(),
               work.data());
    EXPECT_EQ(scales_alone, scales);
    EXPECT_EQ(operand_alone, operand);
  }
}

// block_cast_pair of x under recipe's casts for role against the two casts made one after the
// other: the same codes (where kept), scales, operands, tensor scales and amaxes.
void expect_pair_gives_separate_bits(const Fp8Recipe& recipe, BlockRole role, bool keep_codes,
                                     const std::vector<float>& x, int64_t rows, int64_t cols) {
  const auto n = static_cast<size_t>(rows * cols);
  struct Cast {
    std::vector<uint8_t> codes, scales;
    std::vector<bf16_t> operand;
    float tensor_scale_inv = 0, amax = 0;
    BlockCastOut out(bool keep) {
      return {keep ? codes.data() : nullptr, scales.data(), operand.data(), &tensor_scale_inv,
              &amax};
    }
  };
  std::vector<float> work(n);
  BlockCast row = recipe_block_cast(recipe, role, false, rows, cols);
  BlockCast col = recipe_block_cast(recipe, role, true, rows, cols);
  row.sr_key = counter_key(1);
  col.sr_key = counter_key(2);
  Cast want[2], got[2];
  for (Cast* c : {&want[0], &want[1], &got[0], &got[1]}) {
    c->codes.assign(n, 0);
    c->scales.assign(n * sizeof(float), 0);
    c->operand.assign(n, 0);
  }
  block_cast(row, want[0].out(keep_codes), x.data(), work.data());
  block_cast(col, want[1].out(keep_codes), x.data(), work.data());
  block_cast_pair(row, got[0].out(keep_codes), col, got[1].out(keep_codes), x.data(), work.data());
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(got[k].codes, want[k].codes) << k;
    EXPECT_EQ(got[k].scales, want[k].scales) << k;
    EXPECT_EQ(got[k].operand, want[k].operand) << k;
    EXPECT_EQ(std::bit_cast<uint32_t>(got[k].tensor_scale_inv),
              std::bit_cast<uint32_t>(want[k].tensor_scale_inv))
        << k;
    EXPECT_EQ(std::bit_cast<uint32_t>(got[k].amax), std::bit_cast<uint32_t>(want[k].amax)) << k;
  }
}

std::string pair_case(ScalingKind kind, BlockRole role, bool keep_codes) {
  return std::string(scaling_kind_name(kind)) +
         (role == BlockRole::Input ? " input" : " grad_output") + (keep_codes ? " codes" : "");
}

// A tensor's row-wise and column-wise casts made together (block_cast_pair: one read for the
// amaxes, each stripe cast both ways) give the bits of the two casts made one after the other,
// for every recipe and both activation roles (NVFP4's gradients with stochastic rounding and
// the Hadamard transform), with and without codes kept, amaxes asked for.
TEST(BlockCast, PairedCastsGiveTheBitsOfSeparateOnes) {
  const int64_t rows = 288, cols = 200;  // several stripes of every grid; rows % 16 == 0
  const std::vector<float> x = random_tensor(rows * cols, 23, 2.0f);
  omp_set_num_threads(2);
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    for (const BlockRole role : {BlockRole::Input, BlockRole::GradOutput}) {
      for (const bool keep_codes : {false, true}) {
        SCOPED_TRACE(pair_case(kind, role, keep_codes));
        expect_pair_gives_separate_bits(recipe, role, keep_codes, x, rows, cols);
      }
    }
  }
}

// Issue 35: NVFP4's pair as training makes it, whose amax sweep keeps every block's amax for
// the casts after it (on AVX-512), gives the bits of the two casts apart, which take each
// block's amax from its values just before they cast them: rows of whole blocks and ragged
// ones, several stripes a thread, NaNs (left out of every amax) with the rest finite, and the
// specials (infinities, subnormals, an all-equal block).
TEST(BlockCast, Nvfp4PairFromKeptBlockAmaxesGivesTheBitsOfSeparateCasts) {
  const int64_t rows = 544;
  omp_set_num_threads(2);
  Fp8Recipe recipe;
  recipe.kind = ScalingKind::Nvfp4;
  for (const int64_t cols : {200, 256}) {
    std::vector<float> with_nans = random_tensor(rows * cols, 31, 2.0f);
    for (size_t i = 7; i < with_nans.size(); i += 37) with_nans[i] = NAN;
    const std::vector<float> inputs[] = {with_nans, tensor_with_specials(rows, cols, 37)};
    for (const std::vector<float>& x : inputs) {
      for (const BlockRole role : {BlockRole::Input, BlockRole::GradOutput}) {
        for (const bool keep_codes : {false, true}) {
          SCOPED_TRACE(pair_case(recipe.kind, role, keep_codes) + " " + std::to_string(cols) +
                       (&x == &inputs[0] ? " NaNs" : " specials"));
          expect_pair_gives_separate_bits(recipe, role, keep_codes, x, rows, cols);
        }
      }
    }
  }
}

// Issue 35: a producer's output cast a stripe of rows at a time as it is made
// (block_cast_produced) is cast to the bits block_cast_pair (and block_cast, row-wise alone)
// gives the whole FP32 tensor, with codes kept or not, on one thread or two, for rows that end
// in a short stripe; every row is made once. NVFP4, whose global scale needs the whole
// tensor's amax first, and casts that collect statistics are refused.
TEST(BlockCast, ProducedStripeByStripeGivesTheBitsOfTheWholeTensorsCast) {
  const int64_t rows = 300, cols = 200;  // a short last stripe of 32 and of 128 rows
  const std::vector<float> x = tensor_with_specials(rows, cols, 31);
  const auto n = static_cast<size_t>(rows * cols);
  struct Cast {
    std::vector<uint8_t> codes, scales;
    std::vector<bf16_t> operand;
    float tensor_scale_inv = 0;
    explicit Cast(size_t n) : codes(n, 0), scales(n * sizeof(float), 0), operand(n, 0) {}
    BlockCastOut out(bool keep_codes) {
      return {keep_codes ? codes.data() : nullptr, scales.data(), operand.data(),
              &tensor_scale_inv};
    }
    bool operator==(const Cast&) const = default;
  };
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8}) {
      for (const BlockRole role : {BlockRole::Input, BlockRole::GradOutput}) {
        for (const bool keep_codes : {false, true}) {
          for (const bool pair : {true, false}) {
            SCOPED_TRACE(std::string(scaling_kind_name(kind)) +
                         (role == BlockRole::Input ? " input" : " grad_output") +
                         (keep_codes ? " codes" : "") + (pair ? " pair" : " row-wise") + " on " +
                         std::to_string(threads) + " threads");
            Fp8Recipe recipe;
            recipe.kind = kind;
            const BlockCast row = recipe_block_cast(recipe, role, false, rows, cols);
            const BlockCast col = recipe_block_cast(recipe, role, true, rows, cols);
            Cast want_row(n), want_col(n), got_row(n), got_col(n);
            if (pair) {
              block_cast_pair(row, want_row.out(keep_codes), col, want_col.out(keep_codes),
                              x.data(), nullptr);
            } else {
              block_cast(row, want_row.out(keep_codes), x.data(), nullptr);
            }
            std::vector<int> made(static_cast<size_t>(rows), 0);
            const BlockCastOut row_out = got_row.out(keep_codes), col_out = got_col.out(keep_codes);
            block_cast_produced(row, row_out, pair ? &col : nullptr, pair ? &col_out : nullptr,
                                [&](int64_t r0, int64_t nr, float* stripe) {
                                  for (int64_t r = r0; r < r0 + nr; ++r) {
                                    ++made[static_cast<size_t>(r)];
                                    std::memcpy(stripe + (r - r0) * cols, x.data() + r * cols,
                                                cols * sizeof(float));
                                  }
                                });
            EXPECT_EQ(made, std::vector<int>(made.size(), 1));
            EXPECT_TRUE(got_row == want_row);
            EXPECT_TRUE(got_col == want_col);
            EXPECT_EQ(got_row.tensor_scale_inv, 1.0f);
          }
        }
      }
    }
  }
  Fp8Recipe nvfp4;
  nvfp4.kind = ScalingKind::Nvfp4;
  const BlockCast c = recipe_block_cast(nvfp4, BlockRole::Input, false, rows, cols);
  Cast out(n);
  const auto make = [](int64_t, int64_t, float*) {};
  EXPECT_FALSE(castable_by_stripes(c, out.out(false)));
  EXPECT_THROW(block_cast_produced(c, out.out(false), nullptr, nullptr, make), Error);
  Fp8Recipe mxfp8;
  mxfp8.kind = ScalingKind::Mxfp8;
  BlockScaleStats stats;
  BlockCastOut with_stats = out.out(true);
  with_stats.stats = &stats;
  EXPECT_THROW(block_cast_produced(recipe_block_cast(mxfp8, BlockRole::Input, false, rows, cols),
                                   with_stats, nullptr, nullptr, make),
               Error);
}

// Issue 34: codes written transposed (BlockCastOut::codes_transposed, the K-major layout a
// column-wise copy is read in) are the row-major codes transposed, with the same scales, tensor
// scale and statistics, in single and paired casts, where the cast keeps no BF16 operand.
TEST(BlockCast, TransposedCodesAreTheCodesTransposedAndTheOperandIsOptional) {
  const int64_t rows = 160, cols = 200;  // rows % 16 == 0 (the RHT), columns not of 128
  const std::vector<float> x = random_tensor(rows * cols, 29, 2.0f);
  const auto n = static_cast<size_t>(rows * cols);
  omp_set_num_threads(2);
  std::vector<float> work(n);
  struct Cast {
    std::vector<uint8_t> codes, scales;
    std::vector<bf16_t> operand;
    float tensor_scale_inv = 0;
    BlockScaleStats stats;
    explicit Cast(size_t n) : codes(n, 0), scales(n * sizeof(float), 0), operand(n, 0) {}
    BlockCastOut out(bool transposed, bool stats_too) {
      BlockCastOut o{codes.data(),      scales.data(), transposed ? nullptr : operand.data(),
                     &tensor_scale_inv, nullptr,       stats_too ? &stats : nullptr};
      o.codes_transposed = transposed;
      return o;
    }
  };
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    const BlockCast row = recipe_block_cast(recipe, BlockRole::GradOutput, false, rows, cols);
    const BlockCast col = recipe_block_cast(recipe, BlockRole::GradOutput, true, rows, cols);
    for (const bool paired : {false, true}) {
      for (const bool stats : {false, true}) {
        SCOPED_TRACE(std::string(scaling_kind_name(kind)) + (paired ? " paired" : "") +
                     (stats ? " stats" : ""));
        Cast want_row(n), want_col(n), got_row(n), got_col(n);
        block_cast(row, want_row.out(false, stats), x.data(), work.data());
        block_cast(col, want_col.out(false, stats), x.data(), work.data());
        if (paired) {
          block_cast_pair(row, got_row.out(false, stats), col, got_col.out(true, stats), x.data(),
                          work.data());
          EXPECT_EQ(got_row.codes, want_row.codes);
          EXPECT_EQ(got_row.operand, want_row.operand);
        } else {
          block_cast(col, got_col.out(true, stats), x.data(), work.data());
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(got_col.codes[static_cast<size_t>(c * rows + r)],
                      want_col.codes[static_cast<size_t>(r * cols + c)])
                << r << "," << c;
        EXPECT_EQ(got_col.scales, want_col.scales);
        EXPECT_EQ(got_col.tensor_scale_inv, want_col.tensor_scale_inv);
        if (stats) {
          EXPECT_GT(got_col.stats.blocks, 0);
          EXPECT_EQ(got_col.stats.blocks, want_col.stats.blocks);
          EXPECT_EQ(got_col.stats.zero_blocks, want_col.stats.zero_blocks);
          EXPECT_EQ(got_col.stats.saturated_blocks, want_col.stats.saturated_blocks);
          EXPECT_EQ(got_col.stats.flushed_blocks, want_col.stats.flushed_blocks);
          EXPECT_EQ(got_col.stats.exponents, want_col.stats.exponents);
        }
      }
    }
  }
}

// What a cast did, per block: the multiplier's power of two, all-zero blocks, a block with an
// Inf (clipped: saturated) and an NVFP4 block far below the tensor's amax (its E4M3 scale
// underflows to 0, so every code is 0: flushed).
TEST(BlockCast, StatsCountExponentsZeroSaturatedAndFlushedBlocks) {
  std::vector<float> x(4 * 32, 0.0f);
  for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 3.0f;  // MX: scale 2^-7 (3/448 up)
  x[64] = INFINITY;
  x[65] = 1.0f;
  x[96] = 1e-3f;
  BlockCast c;
  c.grid = {1, 128, 1, 32};
  std::vector<uint8_t> codes(128), scales(4);
  std::vector<bf16_t> operand(128);
  float tsi = 0;
  BlockScaleStats st;
  block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi, nullptr, &st}, x.data(),
             nullptr);
  EXPECT_EQ(st.blocks, 4);
  EXPECT_EQ(st.zero_blocks, 1);
  EXPECT_EQ(st.saturated_blocks, 1);  // the Inf
  EXPECT_EQ(st.flushed_blocks, 0);
  EXPECT_EQ(st.exponents.at(-7), 1);
  EXPECT_EQ(st.exponents.count(-18), 1u);  // 1e-3 / 448 = 2^-18.8, up to the power of two above
  EXPECT_EQ(st.exponents.size(), 3u);      // and 2^127 for the Inf's block

  std::vector<float> y(32, 0.0f);
  y[0] = 1e6f;    // the tensor's amax: S = 2688 / 1e6
  y[16] = 1e-4f;  // block 1: amax * S / 6 far below E4M3's smallest subnormal
  c.scheme = BlockScheme::Nvfp4;
  c.grid = {1, 32, 1, 16};
  block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi, nullptr, &st}, y.data(),
             nullptr);
  EXPECT_EQ(st.blocks, 2);
  EXPECT_EQ(st.flushed_blocks, 1);
  EXPECT_EQ(st.saturated_blocks, 0);
  EXPECT_FLOAT_EQ(st.tensor_scale, 2688.0f / 1e6f);
}

// Issue 35: the bytes a cast moves (block_cast_traffic, the benchmark's bytes per element and
// the step's traffic count), for a 256 x 512 tensor (n values): x read once per sweep (twice
// where NVFP4's global scale or an asked-for amax needs a sweep first), 2 bytes of BF16 operand,
// a byte per kept code (three through the transposed codes' scratch), the block scales.
TEST(BlockCast, TrafficCountsEachSweepOfXAndEachWrite) {
  const int64_t rows = 256, cols = 512, n = rows * cols;
  const auto cast = [&](ScalingKind kind, BlockRole role, bool columnwise) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    return recipe_block_cast(recipe, role, columnwise, rows, cols);
  };
  uint8_t byte = 0;
  bf16_t operand = 0;
  float value = 0;
  BlockCastOut plain{nullptr, &byte, &operand, &value, nullptr};
  BlockCastOut with_codes = plain, transposed = plain, with_amax = plain;
  with_codes.codes = transposed.codes = &byte;
  transposed.codes_transposed = true;
  with_amax.amax = &value;
  const BlockCast mx_row = cast(ScalingKind::Mxfp8, BlockRole::Input, false);
  const BlockCast mx_col = cast(ScalingKind::Mxfp8, BlockRole::Input, true);
  const BlockCast fp8_row = cast(ScalingKind::Block, BlockRole::GradOutput, false);
  const BlockCast nv_row = cast(ScalingKind::Nvfp4, BlockRole::GradOutput, false);
  const BlockCast nv_col = cast(ScalingKind::Nvfp4, BlockRole::GradOutput, true);
  ASSERT_TRUE(nv_col.rht);
  // One sweep: x read, the operand written, an E8M0 scale per 32 values.
  EXPECT_EQ(block_cast_traffic(mx_row, plain), n * (4 + 2) + n / 32);
  EXPECT_EQ(block_cast_traffic(mx_row, with_codes), n * (4 + 2 + 1) + n / 32);
  EXPECT_EQ(block_cast_traffic(mx_col, transposed), n * (4 + 2 + 3) + n / 32);
  EXPECT_EQ(block_cast_traffic(mx_row, with_amax), n * (4 + 4 + 2) + n / 32);
  // Float8BlockScaling's scale_inv is an FP32 per 1x128 block.
  EXPECT_EQ(block_cast_traffic(fp8_row, plain), n * (4 + 2) + n / 128 * 4);
  // NVFP4 sweeps for its global amax first (the transform's for the column-wise copy).
  EXPECT_EQ(block_cast_traffic(nv_row, plain), n * (4 + 4 + 2) + n / 16);
  EXPECT_EQ(block_cast_traffic(nv_col, plain), n * (4 + 4 + 2) + n / 16);
  // A pair reads x once for both copies, after one amax sweep where either needs it.
  EXPECT_EQ(block_cast_pair_traffic(mx_row, plain, mx_col, plain), n * (4 + 2 + 2) + 2 * n / 32);
  // NVFP4's on AVX-512 keeps each block's amax from its sweep for the casts: an FP32 per block
  // of each copy, written and read back.
  const int64_t kept_amaxes = best_isa() == Isa::Avx512 ? 2 * 4 * (2 * n / 16) : 0;
  EXPECT_EQ(block_cast_pair_traffic(nv_row, plain, nv_col, plain),
            n * (4 + 4 + 2 + 2) + 2 * n / 16 + kept_amaxes);
  // With statistics the copies are cast one after the other, the transform written for them.
  BlockScaleStats stats;
  BlockCastOut observed = plain;
  observed.stats = &stats;
  EXPECT_EQ(block_cast_pair_traffic(nv_row, observed, nv_col, observed),
            n * (4 + 4 + 2) + n / 16 + n * (4 + 4 + 2 + 4) + n / 16);
}

}  // namespace
}  // namespace fp8lm
