// The quantize kernels: the scalar twin against the double-precision reference element by
// element, and every SIMD variant against the scalar twin bit for bit, for every length from
// 0 to 1025 (all tail shapes of 8- and 16-wide loops) and unaligned starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "block_inputs.h"
#include "core/e2m1.h"
#include "fp8/quantize.h"
#include "test_util.h"

namespace fp8lm {
namespace {

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) v.push_back(isa);
  return v;
}

TEST(Quantize, ScalarMatchesReferenceCodesAmaxAndCounts) {
  const auto x = test::random_with_specials(20000, 1);
  for (DType f : {DType::E4M3, DType::E5M2}) {
    for (float scale : {1.0f, 224.0f, 0.0078125f, 3.7f}) {
      for (bool sat : {true, false}) {
        std::vector<uint8_t> codes(x.size());
        const CastStats got = quantize(Isa::Scalar, codes.data(), x.data(),
                                       static_cast<int64_t>(x.size()), scale, f, sat);
        float amax = 0.0f;
        int64_t saturated = 0, flushed = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const float scaled = x[i] * scale;
          bool over = false;
          const uint32_t want = minifloat_encode_reference(scaled, fp8_spec(f), sat, &over);
          ASSERT_EQ(codes[i], want) << "x=" << x[i] << " scale=" << scale;
          amax = std::fmax(amax, std::fabs(x[i]));  // fmax ignores NaN
          saturated += over;
          flushed += scaled != 0 && !std::isnan(scaled) && (want & 0x7f) == 0;
        }
        EXPECT_EQ(got.amax, amax);
        EXPECT_EQ(got.saturated, saturated);
        EXPECT_EQ(got.flushed, flushed);
        EXPECT_GT(saturated, 0) << "the input should exercise saturation";
        EXPECT_GT(flushed, 0) << "the input should exercise flush to zero";
      }
    }
  }
}

TEST(Quantize, SimdMatchesScalarBitForBitAtEveryLength) {
  const auto pool = test::random_with_specials(1025 + 1, 2);
  for (Isa isa : simd_isas()) {
    for (DType f : {DType::E4M3, DType::E5M2}) {
      for (bool sat : {true, false}) {
        for (int64_t n = 0; n <= 1025; ++n) {
          const float* x = pool.data() + (n % 2);  // odd starts: unaligned loads
          const float scale = n % 3 == 0 ? 1.0f : 37.5f;
          std::vector<uint8_t> want(n + 1, 0xaa), got(n + 1, 0xaa);
          const CastStats w = quantize(Isa::Scalar, want.data(), x, n, scale, f, sat);
          const CastStats g = quantize(isa, got.data(), x, n, scale, f, sat);
          ASSERT_EQ(got, want) << isa_name(isa) << " n=" << n;  // incl. the guard byte past n
          ASSERT_EQ(std::bit_cast<uint32_t>(g.amax), std::bit_cast<uint32_t>(w.amax))
              << isa_name(isa) << " n=" << n;
          ASSERT_EQ(g.saturated, w.saturated) << isa_name(isa) << " n=" << n;
          ASSERT_EQ(g.flushed, w.flushed) << isa_name(isa) << " n=" << n;
        }
      }
    }
  }
}

// quantize_decoded: the scalar twin's codes and statistics are quantize's (saturating), its
// values each code's decoded value as BF16 (every code once); every SIMD variant gives the
// scalar twin's bits at every length, the guard element past n untouched.
TEST(QuantizeDecoded, ScalarIsQuantizeWithEachCodesValue) {
  const auto random = test::random_with_specials(20000, 3);
  for (DType f : {DType::E4M3, DType::E5M2}) {
    std::vector<float> every(256);  // each code's value once: quantize at scale 1 keeps them
    for (int c = 0; c < 256; ++c) every[c] = fp8_decode(static_cast<uint8_t>(c), f);
    for (const auto& [x, scale] : {std::pair{random, 3.0f}, std::pair{every, 1.0f}}) {
      const auto n = static_cast<int64_t>(x.size());
      std::vector<uint8_t> want(x.size()), got(x.size());
      std::vector<bf16_t> values(x.size());
      const CastStats w = quantize(Isa::Scalar, want.data(), x.data(), n, scale, f);
      const CastStats g =
          quantize_decoded(Isa::Scalar, got.data(), values.data(), x.data(), n, scale, f);
      EXPECT_EQ(got, want);
      EXPECT_EQ(std::bit_cast<uint32_t>(g.amax), std::bit_cast<uint32_t>(w.amax));
      EXPECT_EQ(g.saturated, w.saturated);
      EXPECT_EQ(g.flushed, w.flushed);
      for (int64_t i = 0; i < n; ++i) {
        const float v = fp8_decode(want[i], f);
        ASSERT_EQ(values[i], bf16_from_float(v)) << i;
        if (!std::isnan(v)) {
          ASSERT_EQ(bf16_to_float(values[i]), v) << "exact in BF16";
        }
      }
    }
  }
}

TEST(QuantizeDecoded, SimdMatchesScalarBitForBitAtEveryLength) {
  const auto pool = test::random_with_specials(1025 + 1, 4);
  for (Isa isa : simd_isas()) {
    for (DType f : {DType::E4M3, DType::E5M2}) {
      for (int64_t n = 0; n <= 1025; ++n) {
        const float* x = pool.data() + (n % 2);  // odd starts: unaligned loads
        const float scale = n % 3 == 0 ? 1.0f : 37.5f;
        std::vector<uint8_t> want(n + 1, 0xaa), got(n + 1, 0xaa);
        std::vector<bf16_t> want16(n + 1, 0x5555), got16(n + 1, 0x5555);
        const CastStats w =
            quantize_decoded(Isa::Scalar, want.data(), want16.data(), x, n, scale, f);
        const CastStats g = quantize_decoded(isa, got.data(), got16.data(), x, n, scale, f);
        ASSERT_EQ(got, want) << isa_name(isa) << " n=" << n;
        ASSERT_EQ(got16, want16) << isa_name(isa) << " n=" << n;
        ASSERT_EQ(std::bit_cast<uint32_t>(g.amax), std::bit_cast<uint32_t>(w.amax)) << n;
        ASSERT_EQ(g.saturated, w.saturated) << isa_name(isa) << " n=" << n;
        ASSERT_EQ(g.flushed, w.flushed) << isa_name(isa) << " n=" << n;
      }
    }
  }
}

// Every SIMD variant at the values where rounding changes its answer, each with its neighbouring
// floats and both signs: max and the tie past it (the saturated count), the flush bound, the
// smallest subnormal, the tie between the largest subnormal and the smallest normal; every code's
// own value; NaN of either sign.
TEST(QuantizeDecoded, SimdMatchesScalarAtTheRoundingBoundaries) {
  for (DType f : {DType::E4M3, DType::E5M2}) {
    const int mantissa_bits = f == DType::E4M3 ? 3 : 2;
    const float max = fp8_max(f), sub = fp8_min_subnormal(f);
    const float min_normal = std::ldexp(sub, mantissa_bits);
    const float half_spacing_at_max = std::ldexp(1.0f, std::ilogb(max) - mantissa_bits - 1);
    std::vector<float> x;
    for (float b : {max, max + half_spacing_at_max, sub / 2, sub, min_normal - sub / 2}) {
      for (float v : {std::nextafter(b, 0.0f), b, std::nextafter(b, INFINITY)}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
    for (int c = 0; c < 256; ++c) x.push_back(fp8_decode(static_cast<uint8_t>(c), f));
    x.push_back(NAN);
    x.push_back(-NAN);
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> want(x.size());
    std::vector<bf16_t> want16(x.size());
    const CastStats w =
        quantize_decoded(Isa::Scalar, want.data(), want16.data(), x.data(), n, 1.0f, f);
    EXPECT_GT(w.saturated, 0);
    EXPECT_GT(w.flushed, 0);
    for (Isa isa : simd_isas()) {
      std::vector<uint8_t> got(x.size());
      std::vector<bf16_t> got16(x.size());
      const CastStats g = quantize_decoded(isa, got.data(), got16.data(), x.data(), n, 1.0f, f);
      EXPECT_EQ(got, want) << isa_name(isa);
      EXPECT_EQ(got16, want16) << isa_name(isa);
      EXPECT_EQ(g.saturated, w.saturated) << isa_name(isa);
      EXPECT_EQ(g.flushed, w.flushed) << isa_name(isa);
    }
  }
}

TEST(Quantize, AmaxIgnoresNanAndCountsInf) {
  const std::vector<float> x = {1.0f, NAN, -3.0f, 2.0f};
  const std::vector<float> with_inf = {1.0f, -INFINITY, NAN};
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) continue;
    std::vector<uint8_t> codes(4);
    EXPECT_EQ(quantize(isa, codes.data(), x.data(), 4, 1.0f, DType::E4M3).amax, 3.0f)
        << isa_name(isa);
    EXPECT_EQ(absmax(isa, x.data(), 4), 3.0f) << isa_name(isa);
    EXPECT_EQ(quantize(isa, codes.data(), with_inf.data(), 3, 1.0f, DType::E5M2).amax, INFINITY);
    EXPECT_EQ(absmax(isa, with_inf.data(), 3), INFINITY) << isa_name(isa);
    EXPECT_EQ(absmax(isa, x.data(), 0), 0.0f) << isa_name(isa);
  }
}

TEST(Quantize, AbsmaxSimdMatchesScalarAtEveryLength) {
  const auto pool = test::random_with_specials(1025, 3);
  for (Isa isa : simd_isas()) {
    for (int64_t n = 0; n <= 1025; ++n) {
      ASSERT_EQ(absmax(isa, pool.data(), n), absmax(Isa::Scalar, pool.data(), n)) << n;
    }
  }
}

TEST(Dequantize, EveryIsaDecodesTimesScaleInv) {
  std::vector<uint8_t> codes(1025 + 3);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 + 3);
  for (DType f : {DType::E4M3, DType::E5M2}) {
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (!isa_supported(isa)) continue;
      for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 255, 1025}) {
        std::vector<float> y(n + 1, 12345.0f);
        dequantize(isa, y.data(), codes.data() + 1, n, 0.25f, f);
        for (int64_t i = 0; i < n; ++i) {
          const float want = fp8_decode(codes[i + 1], f) * 0.25f;
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(y[i])) << isa_name(isa) << " " << i;
          } else {
            ASSERT_EQ(y[i], want) << isa_name(isa) << " " << i;
          }
        }
        EXPECT_EQ(y[n], 12345.0f) << "wrote past n: " << isa_name(isa);
      }
    }
  }
}

// The block-scaled operand expansion: every code of each format times scales spanning
// BF16's range (products that round, overflow to Inf, fall into subnormals, and NaN codes
// or scales), at every tail length, each SIMD variant against the scalar twin bit for bit,
// and the twin against bf16_from_float of the float product.
// Equal bits, or both NaN: a NaN code times a NaN scale is either NaN, depending on which
// operand the compiler puts first (no cast makes that product: a block scale is never NaN).
bool same_bf16(bf16_t a, bf16_t b) {
  const auto nan = [](bf16_t v) { return (v & 0x7fffu) > 0x7f80u; };
  return a == b || (nan(a) && nan(b));
}

TEST(ExpandToBf16, EverySimdIsaMatchesTheScalarTwinBitForBit) {
  constexpr int64_t kMax = 1025;
  std::vector<uint8_t> codes(kMax + 1);
  std::vector<float> scale(kMax + 1);
  const float scales[] = {1.0f, 0x1p-127f, 0x1p120f, 0x1p-140f, 3.3f, 1.0f / 3, NAN, 0x1p-149f};
  for (size_t i = 0; i < codes.size(); ++i) {
    codes[i] = static_cast<uint8_t>(i * 37 + 5);
    scale[i] = scales[(i / 3) % 8];
  }
  for (const DType f : {DType::E4M3, DType::E5M2, DType::E2M1}) {
    const int size = f == DType::E2M1 ? 16 : 256;
    const float* table = f == DType::E2M1   ? kE2M1Values.data()
                         : f == DType::E4M3 ? fp8_decode_table(DType::E4M3).data()
                                            : fp8_decode_table(DType::E5M2).data();
    std::vector<uint8_t> c = codes;
    for (uint8_t& v : c) v = static_cast<uint8_t>(v % size);
    for (int64_t n = 0; n <= kMax; n += n < 40 ? 1 : 197) {
      std::vector<bf16_t> want(n + 1, 0x1234);
      expand_to_bf16(Isa::Scalar, want.data(), c.data() + 1, scale.data() + 1, n, f);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_PRED2(same_bf16, want[i], bf16_from_float(table[c[i + 1]] * scale[i + 1])) << i;
      for (const Isa isa : simd_isas()) {
        std::vector<bf16_t> got(n + 1, 0x1234);
        expand_to_bf16(isa, got.data(), c.data() + 1, scale.data() + 1, n, f);
        for (int64_t i = 0; i <= n; ++i)
          ASSERT_PRED2(same_bf16, got[i], want[i])
              << isa_name(isa) << " n=" << n << " format " << static_cast<int>(f) << " i=" << i;
      }
    }
  }
}

// The fused cast: each SIMD variant against the scalar twin, which is quantize at scale 1 then
// expand_to_bf16, on values with every special and scales spanning BF16's range; and the
// operand alone (fp8_round_to_bf16) equal to it.
TEST(Fp8CastToBf16, EverySimdIsaMatchesTheScalarTwinBitForBit) {
  // Random values with the specials, then each format's rounding ties between neighbouring
  // values (and one float either side), the saturation edges and a sweep of float bit patterns.
  auto x = test::random_with_specials(1100, 5);
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    for (int code = 0; code < 0x7e; ++code) {
      const float lo = fp8_decode(static_cast<uint8_t>(code), f);
      const float hi = fp8_decode(static_cast<uint8_t>(code + 1), f);
      const float mid = lo + (hi - lo) / 2;
      for (const float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
        x.insert(x.end(), {v, -v});
    }
  }
  for (const float v : {464.0f, 463.99f, 448.0f, 57344.0f, 61440.0f, 61439.0f, 1e30f})
    x.insert(x.end(), {v, -v});
  for (const float v : float_sweep()) x.push_back(v);
  std::vector<float> scale(x.size());
  const float scales[] = {1.0f, 0x1p-127f, 0x1p120f, 0x1p-140f, 0x1p-3f, 0x1p7f};
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = scales[(i / 5) % 6];
  for (const DType f : {DType::E4M3, DType::E5M2}) {
    std::vector<int64_t> lengths;  // every tail shape, then longer ones, then all of x
    for (int64_t n = 0; n < 40; ++n) lengths.push_back(n);
    for (int64_t n = 43; n < static_cast<int64_t>(x.size()) - 1; n = 2 * n + 3)
      lengths.push_back(n);
    lengths.push_back(static_cast<int64_t>(x.size()) - 1);
    for (const int64_t n : lengths) {
      std::vector<uint8_t> want_codes(n + 1, 0xaa), codes(n);
      std::vector<bf16_t> want(n + 1, 0x1234);
      fp8_cast_to_bf16(Isa::Scalar, want_codes.data(), want.data(), x.data() + 1, scale.data() + 1,
                       n, f);
      quantize(Isa::Scalar, codes.data(), x.data() + 1, n, 1.0f, f);
      ASSERT_TRUE(std::equal(codes.begin(), codes.end(), want_codes.begin())) << n;
      for (const Isa isa : simd_isas()) {
        std::vector<uint8_t> got_codes(n + 1, 0xaa);
        std::vector<bf16_t> got(n + 1, 0x1234);
        fp8_cast_to_bf16(isa, got_codes.data(), got.data(), x.data() + 1, scale.data() + 1, n, f);
        ASSERT_EQ(got_codes, want_codes) << isa_name(isa) << " n=" << n;
        for (int64_t i = 0; i <= n; ++i)
          ASSERT_PRED2(same_bf16, got[i], want[i]) << isa_name(isa) << " n=" << n << " i=" << i;
      }
      // Without the codes: the same operand from the float-domain rounding, every ISA.
      for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        std::vector<bf16_t> got(n + 1, 0x1234);
        fp8_round_to_bf16(isa, got.data(), x.data() + 1, scale.data() + 1, n, f);
        for (int64_t i = 0; i <= n; ++i)
          ASSERT_PRED2(same_bf16, got[i], want[i])
              << "round " << isa_name(isa) << " n=" << n << " i=" << i << " x=" << x[i + 1];
      }
    }
  }
}

// NVFP4's fused cast, nearest and stochastic: every SIMD variant against the scalar twin
// (e2m1_quantize at multiplier 1, then expand_to_bf16), codes and operand.
TEST(E2m1CastToBf16, EverySimdIsaMatchesTheScalarTwinBitForBit) {
  auto x = test::random_with_specials(1100, 7);
  for (const float v : float_sweep()) x.push_back(v);
  std::vector<float> scale(x.size());
  const float scales[] = {1.0f, 448.0f, 0x1p-9f, 0.75f, 0x1p-140f};
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = scales[(i / 3) % 5];
  const uint32_t key = 0x9e3779b9u;
  for (const uint32_t* sr : {static_cast<const uint32_t*>(nullptr), &key}) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{17}, int64_t{1023},
                            static_cast<int64_t>(x.size()) - 1}) {
      std::vector<uint8_t> want_codes(n + 1, 0xaa);
      std::vector<bf16_t> want(n + 1, 0x1234);
      e2m1_cast_to_bf16(Isa::Scalar, want_codes.data(), want.data(), x.data() + 1, scale.data() + 1,
                        n, sr, 5);
      for (const Isa isa : simd_isas()) {
        std::vector<uint8_t> got_codes(n + 1, 0xaa);
        std::vector<bf16_t> got(n + 1, 0x1234);
        e2m1_cast_to_bf16(isa, got_codes.data(), got.data(), x.data() + 1, scale.data() + 1, n, sr,
                          5);
        ASSERT_EQ(got_codes, want_codes) << isa_name(isa) << " n=" << n;
        for (int64_t i = 0; i <= n; ++i)
          ASSERT_PRED2(same_bf16, got[i], want[i]) << isa_name(isa) << " n=" << n << " i=" << i;
      }
    }
  }
}

// The block amaxes of a row, for the recipes' block lengths and odd ones, at row lengths that
// end blocks early: every SIMD variant against the scalar twin, and the twin against fmax over
// each block (NaN left out, Inf kept), starting from amaxes already there.
TEST(RowBlockAbsmax, EverySimdIsaMatchesTheScalarTwinAndFmax) {
  const auto x = test::random_with_specials(1100, 3);
  for (const int64_t block : {1, 7, 16, 32, 128}) {
    for (const int64_t n : {0, 1, 15, 16, 17, 100, 128, 1025}) {
      const int64_t blocks = (n + block - 1) / block;
      std::vector<float> want(static_cast<size_t>(blocks));
      for (int64_t b = 0; b < blocks; ++b) want[b] = b % 3 == 0 ? 0.5f : 0.0f;
      std::vector<float> start = want;
      row_block_absmax(Isa::Scalar, want.data(), x.data() + 1, n, block);
      for (int64_t b = 0; b < blocks; ++b) {
        float m = start[b];
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
          m = std::fmax(m, std::fabs(x[i + 1]));
        ASSERT_EQ(want[b], m) << "block " << block << " n " << n << " b " << b;
      }
      for (const Isa isa : simd_isas()) {
        std::vector<float> got = start;
        row_block_absmax(isa, got.data(), x.data() + 1, n, block);
        ASSERT_EQ(got, want) << isa_name(isa) << " block " << block << " n " << n;
      }
    }
  }
}

TEST(Quantize, DispatchPicksTheWidestSupportedIsa) {
  const Isa best = best_isa();
  EXPECT_TRUE(isa_supported(best));
  if (isa_supported(Isa::Avx512)) {
    EXPECT_EQ(best, Isa::Avx512);
  }
}

}  // namespace
}  // namespace fp8lm
