// Causal attention with BF16 math (kernels/cpu/attention.h's *_bf16): the AVX512-BF16 kernel
// set gives the generic set's bits (both are dot2 chains; held with the same FP32 softmax), and
// every set is attention: close to the double-precision reference run on the same BF16-rounded
// inputs.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "core/cpu_features.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_isa.h"
#include "test_util.h"

namespace fp8lm {
namespace {

struct Shape {
  int64_t B, T, C, H, Hkv;
  int64_t hd() const { return C / H; }
  int64_t row() const { return C + 2 * Hkv * hd(); }
  std::string name() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
           " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv);
  }
};

// One key; one short of, exactly, and one past a tile (odd T leaves a missing odd row in the
// last pair); odd head sizes (half pairs padded with a zero); hd = 200 (two register chunks);
// grouped-query attention.
const Shape kShapes[] = {{2, 1, 8, 8, 8},    {2, 63, 16, 2, 2},  {2, 64, 64, 2, 2},
                         {2, 65, 128, 2, 2}, {2, 65, 9, 1, 1},   {2, 200, 96, 3, 3},
                         {2, 130, 33, 1, 1}, {1, 70, 400, 2, 2}, {2, 65, 64, 4, 2},
                         {1, 130, 128, 8, 1}};

std::vector<float> rounded_to_bf16(std::vector<float> x) {
  for (float& v : x) v = bf16_to_float(bf16_from_float(v));
  return x;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result run(cpu::AttentionIsa isa, const std::vector<float>& qkv, const std::vector<float>& dout,
           const Shape& s) {
  Result r{std::vector<float>(s.B * s.T * s.C), std::vector<float>(s.B * s.H * s.T),
           std::vector<float>(s.B * s.T * s.row(), std::numeric_limits<float>::quiet_NaN())};
  cpu::attention_forward_bf16_with(isa, r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.H,
                                   s.Hkv);
  cpu::attention_backward_bf16_with(isa, r.dqkv.data(), dout.data(), qkv.data(), r.out.data(),
                                    r.lse.data(), s.B, s.T, s.C, s.H, s.Hkv);
  return r;
}

double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// The sets with their own products (FMAs, VDPBF16PS) that this CPU can run; each must give the
// bits of kAvx512 (the generic BF16 products beside the same AVX-512 softmax).
std::vector<std::pair<cpu::AttentionIsa, std::string>> fast_sets() {
  std::vector<std::pair<cpu::AttentionIsa, std::string>> sets;
  if (cpu_features().avx512) sets.emplace_back(cpu::AttentionIsa::kAvx512Fma, "avx512-fma");
  if (cpu_features().avx512 && cpu_features().avx512_bf16)
    sets.emplace_back(cpu::AttentionIsa::kAvx512Bf16, "avx512-bf16");
  return sets;
}

std::vector<std::pair<cpu::AttentionIsa, std::string>> runnable_sets() {
  std::vector<std::pair<cpu::AttentionIsa, std::string>> sets{
      {cpu::AttentionIsa::kGeneric, "generic"}};
  if (cpu_features().avx512) sets.emplace_back(cpu::AttentionIsa::kAvx512, "avx512");
  for (const auto& set : fast_sets()) sets.push_back(set);
  return sets;
}

TEST(AttentionBf16, FastSetsGiveTheGenericSetsBits) {
  if (!cpu_features().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  for (const Shape& s : kShapes) {
    const auto qkv = test::random_normal(s.B * s.T * s.row(), 1);
    const auto dout = test::random_normal(s.B * s.T * s.C, 2);
    const Result generic = run(cpu::AttentionIsa::kAvx512, qkv, dout, s);
    for (const auto& [isa, name] : fast_sets()) {
      const Result fast = run(isa, qkv, dout, s);
      const std::string what = s.name() + " " + name;
      EXPECT_TRUE(test::same_bits(fast.out, generic.out)) << "out " + what;
      EXPECT_TRUE(test::same_bits(fast.lse, generic.lse)) << "lse " + what;
      EXPECT_TRUE(test::same_bits(fast.dqkv, generic.dqkv)) << "dqkv " + what;
    }
  }
}

// q, k and v as saved in BF16 for backward, read as they are: the bits of backward on their
// FP32 widening, on every set this CPU runs (the tiny values the packs flush included).
TEST(AttentionBf16, BackwardFromSavedBf16GivesTheBitsOfItsWidening) {
  for (const Shape& s : kShapes) {
    const int64_t n = s.B * s.T * s.row();
    auto widened = test::random_normal(n, 3);
    for (int64_t i = 0; i < n; i += 7) widened[i] = i % 2 ? 1e-40f : -3e-39f;  // BF16 subnormals
    std::vector<bf16_t> qkv16(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      qkv16[i] = bf16_from_float(widened[i]);
      widened[i] = bf16_to_float(qkv16[i]);
    }
    const auto dout = test::random_normal(s.B * s.T * s.C, 4);
    for (const auto& [isa, name] : runnable_sets()) {
      const Result want = run(isa, widened, dout, s);
      std::vector<float> got(want.dqkv.size(), std::numeric_limits<float>::quiet_NaN());
      cpu::attention_backward_bf16_with(isa, got.data(), dout.data(), qkv16.data(), want.out.data(),
                                        want.lse.data(), s.B, s.T, s.C, s.H, s.Hkv);
      EXPECT_TRUE(test::same_bits(got, want.dqkv)) << s.name() + " " + name;
    }
  }
}

// The BF16 packs of every set against the FP32 ones on the widened values, bit patterns the
// model never saves included: NaNs (a signaling one made quiet, as widening then rounding
// makes it), infinities, subnormals of both signs.
TEST(AttentionBf16, Bf16PacksGiveTheFp32PacksBitsOnTheWidenedValues) {
  std::vector<const cpu::attention_tiles::Bf16Kernels*> sets{
      &cpu::attention_tiles::generic_bf16_kernels()};
  if (cpu_features().avx512) sets.push_back(&cpu::avx512::attention_bf16_fma_kernels());
  if (cpu_features().avx512 && cpu_features().avx512_bf16)
    sets.push_back(&cpu::avx512::attention_bf16_kernels());
  const int64_t rows = 37, stride = 45;
  for (const int64_t hd : {int64_t{1}, int64_t{9}, int64_t{32}, int64_t{40}}) {
    std::vector<bf16_t> b16(static_cast<size_t>(rows * stride));
    const bf16_t specials[] = {0x7f81, 0xffc1, 0x7f80, 0xff80, 0x0001, 0x8040, 0x0000, 0x8000};
    const auto normal = test::random_normal(rows * stride, 5);
    for (size_t i = 0; i < b16.size(); ++i)
      b16[i] = i % 3 == 0 ? specials[(i / 3) % 8] : bf16_from_float(normal[i]);
    std::vector<float> f32(b16.size());
    for (size_t i = 0; i < b16.size(); ++i) f32[i] = bf16_to_float(b16[i]);
    const size_t room = 64 * 64 * 4;
    for (const auto* k : sets) {
      SCOPED_TRACE("hd " + std::to_string(hd));
      std::vector<uint32_t> want(room, 1), got(room, 1);
      k->pack_half_pairs(want.data(), 30, f32.data(), stride, rows, hd);
      k->pack_half_pairs_bf16(got.data(), 30, b16.data(), stride, rows, hd);
      EXPECT_EQ(got, want) << "half pairs";
      std::fill(want.begin(), want.end(), 1), std::fill(got.begin(), got.end(), 1);
      k->pack_tile_pairs(want.data(), f32.data(), stride, rows, hd);
      k->pack_tile_pairs_bf16(got.data(), b16.data(), stride, rows, hd);
      EXPECT_EQ(got, want) << "tile pairs";
      std::fill(want.begin(), want.end(), 1), std::fill(got.begin(), got.end(), 1);
      k->pack_row_pairs(want.data(), 48, f32.data(), stride, rows, hd);
      k->pack_row_pairs_bf16(got.data(), 48, b16.data(), stride, rows, hd);
      EXPECT_EQ(got, want) << "row pairs";
    }
  }
}

// The FP32 packs round to nearest even as bf16_from_float does (a NaN made quiet) and flush
// what is subnormal after the rounding: every set gives the generic set's pairs on the bit
// patterns at the edges of that rule. The upper half of the rows holds FP32 subnormals too,
// among them those that round up to the smallest normal BF16 (the pattern a conversion that
// reads subnormal inputs as zero would get wrong); the lower half holds none, so sets with a
// path for vectors free of them take it there, on NaNs, infinities, ties and FLT_MAX.
TEST(AttentionBf16, Fp32PacksGiveTheGenericSetsBitsAtTheEdgesOfRounding) {
  if (!cpu_features().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<const cpu::attention_tiles::Bf16Kernels*> sets{
      &cpu::avx512::attention_bf16_fma_kernels()};
  if (cpu_features().avx512_bf16) sets.push_back(&cpu::avx512::attention_bf16_kernels());
  const auto& generic = cpu::attention_tiles::generic_bf16_kernels();
  using cpu::attention_tiles::kKeyTile;
  const uint32_t edges[] = {0x7f800001, 0xffc00001, 0x7fa00000, 0x7f800000, 0xff800000,
                            0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x3f808000, 0x3f818000,
                            0x80000000, 0x00800000, 0x80800000};
  const uint32_t subnormals[] = {0x00000001, 0x807f7fff, 0x007f8000, 0x807fffff, 0x00400000};
  const int64_t rows = 64;
  auto p = test::random_normal(rows * kKeyTile, 9);
  for (int64_t i = 0; i < rows * kKeyTile; ++i) {
    if (i % 5 == 0) p[i] = std::bit_cast<float>(edges[(i / 5) % std::size(edges)]);
    if (i >= rows / 2 * kKeyTile && i % 7 == 0)
      p[i] = std::bit_cast<float>(subnormals[(i / 7) % std::size(subnormals)]);
  }
  const size_t room = rows * kKeyTile * 2;
  for (const auto* k : sets) {
    for (const int64_t hd : {int64_t{9}, int64_t{64}}) {
      SCOPED_TRACE("hd " + std::to_string(hd));
      std::vector<uint32_t> want(room, 1), got(room, 1);
      generic.pack_half_pairs(want.data(), 40, p.data(), kKeyTile, rows, hd);
      k->pack_half_pairs(got.data(), 40, p.data(), kKeyTile, rows, hd);
      EXPECT_EQ(got, want) << "half pairs";
      std::fill(want.begin(), want.end(), 1), std::fill(got.begin(), got.end(), 1);
      generic.pack_tile_pairs(want.data(), p.data(), kKeyTile, rows, hd);
      k->pack_tile_pairs(got.data(), p.data(), kKeyTile, rows, hd);
      EXPECT_EQ(got, want) << "tile pairs";
      std::fill(want.begin(), want.end(), 1), std::fill(got.begin(), got.end(), 1);
      generic.pack_row_pairs(want.data(), kKeyTile, p.data(), kKeyTile, rows, hd);
      k->pack_row_pairs(got.data(), kKeyTile, p.data(), kKeyTile, rows, hd);
      EXPECT_EQ(got, want) << "row pairs";
    }
    for (const cpu::attention_tiles::Visibility vis :
         {cpu::attention_tiles::Visibility{64, 64}, cpu::attention_tiles::Visibility{1, 64}}) {
      SCOPED_TRACE("visible from " + std::to_string(vis.first));
      std::vector<uint32_t> want(room, 1), got(room, 1);
      generic.pack_weight_rows(want.data(), p.data(), rows, vis);
      k->pack_weight_rows(got.data(), p.data(), rows, vis);
      EXPECT_EQ(got, want) << "weight rows";
    }
    std::vector<uint32_t> want(room, 1), got(room, 1);
    generic.pack_weight_pairs(want.data(), p.data(), rows, {64, 64});
    k->pack_weight_pairs(got.data(), p.data(), rows, {64, 64});
    EXPECT_EQ(got, want) << "weight pairs";
    // The carry itself: 0x007f8000 rounds up to BF16's smallest normal, 0x807fffff to its
    // negative; 0x807f7fff rounds to a subnormal, flushed to -0.
    std::vector<float> two_rows(32, 0.0f);  // two rows of 16, pairs taken down the columns
    two_rows[0] = std::bit_cast<float>(0x007f8000u);
    two_rows[1] = std::bit_cast<float>(0x807f7fffu);
    two_rows[16] = std::bit_cast<float>(0x807fffffu);
    uint32_t pair[2] = {1, 1};
    k->pack_row_pairs(pair, 2, two_rows.data(), 16, 2, 2);
    EXPECT_EQ(pair[0], 0x80800080u);
    EXPECT_EQ(pair[1], 0x00008000u);
  }
}

// The FMA set flushes subnormals through MXCSR around its products: what follows on the thread
// (the softmax, the rest of the model) must find the caller's MXCSR again.
TEST(AttentionBf16, FmaSetLeavesTheThreadsFloatingPointModeAsItWas) {
  if (!cpu_features().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  const Shape s{1, 70, 64, 2, 2};
  const auto qkv = test::random_normal(s.B * s.T * s.row(), 1);
  const auto dout = test::random_normal(s.B * s.T * s.C, 2);
  // The control bits (rounding, DAZ, FTZ, exception masks); the low 6 are sticky status flags
  // that the softmax's arithmetic may raise.
  constexpr unsigned kControl = ~0x3fu;
  const unsigned before = _mm_getcsr() & kControl;
  run(cpu::AttentionIsa::kAvx512Fma, qkv, dout, s);
  EXPECT_EQ(_mm_getcsr() & kControl, before);
  volatile float tiny = 1e-38f;  // volatile: multiplied at run time, under the thread's MXCSR
  tiny = tiny * 1e-3f;
  EXPECT_GT(tiny, 0.0f) << "a subnormal product was flushed";
}

// Products below FLT_MIN flush to zero in the instruction (and so in dot2); q and k of 1e-20
// make every score's products 1e-40, and tiny gradients do the same to the weighted sums.
TEST(AttentionBf16, SetsFlushTinyProductsAlike) {
  if (!cpu_features().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  const Shape s{1, 70, 64, 2, 2};
  const auto qkv = test::random_normal(s.B * s.T * s.row(), 3, 0.0f, 1e-20f);
  const auto dout = test::random_normal(s.B * s.T * s.C, 4, 0.0f, 1e-20f);
  const Result generic = run(cpu::AttentionIsa::kAvx512, qkv, dout, s);
  for (const auto& [isa, name] : fast_sets()) {
    const Result fast = run(isa, qkv, dout, s);
    EXPECT_TRUE(test::same_bits(fast.out, generic.out)) << "out " << name;
    EXPECT_TRUE(test::same_bits(fast.dqkv, generic.dqkv)) << "dqkv " << name;
  }
  // Every score flushed to zero: uniform weights, so a query's output is the mean of its values.
  const int64_t last = s.T - 1;
  double mean = 0.0;
  for (int64_t j = 0; j <= last; ++j)
    mean += bf16_to_float(bf16_from_float(qkv[j * s.row() + 2 * s.C]));
  mean /= static_cast<double>(s.T);
  EXPECT_NEAR(generic.out[last * s.C], mean, 1e-2 * std::fabs(mean));
}

// Products that fall below FLT_MIN inside sums whose other terms are normal: output gradients of
// 1e-37 times softmax weights below 0.1 make dv's products subnormal (flushed, so dv keeps only
// the larger weights' terms), and dS of that size does the same to dq and dk. Ordinary q, k, v.
TEST(AttentionBf16, SetsFlushSubnormalProductsInNormalSumsAlike) {
  if (!cpu_features().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  const Shape s{1, 70, 64, 2, 2};
  const auto qkv = test::random_normal(s.B * s.T * s.row(), 7);
  const auto dout = test::random_normal(s.B * s.T * s.C, 8, 0.0f, 1e-37f);
  const Result generic = run(cpu::AttentionIsa::kAvx512, qkv, dout, s);
  for (const auto& [isa, name] : fast_sets()) {
    const Result fast = run(isa, qkv, dout, s);
    EXPECT_TRUE(test::same_bits(fast.dqkv, generic.dqkv)) << "dqkv " << name;
  }
}

// Against the double reference fed the same BF16-rounded q, k, v and dout, what remains is the
// rounding of the weights P (forward, dv) and dS (dq, dk) to BF16: each weight off by at most
// 2^-9 of itself. An output is a convex combination of values, so it moves by at most 2^-9 of
// max|v|; a gradient is a sum of at most T weighted rows whose rounding errors add up, so the
// bound grows with sqrt(T) for independent errors (the worst case, T, is far from what happens:
// over these shapes the largest errors sit at least 3.6x (out) and 14x (dqkv) below the bounds,
// EPYC VM, 25f3f5e).
TEST(AttentionBf16, IsAttentionWithBf16Weights) {
  for (const Shape& s : kShapes) {
    const auto qkv = rounded_to_bf16(test::random_normal(s.B * s.T * s.row(), 5));
    const auto dout = rounded_to_bf16(test::random_normal(s.B * s.T * s.C, 6));
    std::vector<float> out(s.B * s.T * s.C), lse(s.B * s.H * s.T), dqkv(s.B * s.T * s.row());
    cpu::ref::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.H, s.Hkv);
    cpu::ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B,
                                 s.T, s.C, s.H, s.Hkv);
    for (const auto& [isa, name] : runnable_sets()) {
      const Result r = run(isa, qkv, dout, s);
      const std::string what = s.name() + " " + name;
      test::expect_close(r.out, out, 0.0f, static_cast<float>(0x1p-8 * max_abs(out)),
                         ("out " + what).c_str());
      test::expect_close(r.lse, lse, 0.0f, static_cast<float>(0x1p-16 * (max_abs(lse) + 1.0)),
                         ("lse " + what).c_str());
      const double grow = std::sqrt(static_cast<double>(s.T));
      test::expect_close(r.dqkv, dqkv, 0.0f, static_cast<float>(0x1p-8 * grow * max_abs(dqkv)),
                         ("dqkv " + what).c_str());
    }
  }
}

// The kernels keep per-thread scratch across calls; what a call left there (here NaN from a
// larger shape) must not reach another call's results.
TEST(AttentionBf16, WhatScratchHeldChangesNothing) {
  for (const auto& [isa, name] : runnable_sets()) {
    const Shape s{2, 65, 64, 4, 2}, big{1, 130, 128, 2, 2};
    const auto qkv = test::random_normal(s.B * s.T * s.row(), 7);
    const auto dout = test::random_normal(s.B * s.T * s.C, 8);
    const Result first = run(isa, qkv, dout, s);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    run(isa, std::vector<float>(big.B * big.T * big.row(), nan),
        std::vector<float>(big.B * big.T * big.C, nan), big);
    const Result again = run(isa, qkv, dout, s);
    EXPECT_TRUE(test::same_bits(again.out, first.out)) << "out " + name;
    EXPECT_TRUE(test::same_bits(again.dqkv, first.dqkv)) << "dqkv " + name;
  }
}

}  // namespace
}  // namespace fp8lm
