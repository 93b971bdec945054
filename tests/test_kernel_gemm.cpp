// GEMMs of every precision against the double-accumulating reference, for all transposes,
// and the FP32 -> BF16 operand cast against bf16_from_float bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "fp8/quantize.h"
#include "fp8lm/error.h"
#include "kernels/cpu/casts.h"
#include "kernels/cpu/gemm.h"
#include "kernels/traffic.h"
#include "test_util.h"

namespace fp8lm::cpu {
namespace {

// FP32 accumulation of K products (any order, any blocking) differs from the exact sum by at
// most about K * 2^-24 * sum|a_k b_k|; the bound is computed per element from the operands.
void expect_within_fp32_accumulation(const std::vector<float>& got, const std::vector<float>& A,
                                     const std::vector<float>& B, Trans ta, Trans tb, int64_t M,
                                     int64_t N, int64_t K, float alpha,
                                     const std::vector<float>& want) {
  const std::vector<float> mag =
      test::gemm_magnitudes(ta, tb, M, N, K, alpha, A, B, 0.0f, {}, nullptr);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      const double tol = (static_cast<double>(K) + 2) * 0x1p-24 * mag[m * N + n] + 1e-30;
      ASSERT_NEAR(got[m * N + n], want[m * N + n], tol) << "m=" << m << " n=" << n << " K=" << K;
    }
  }
}

struct Shape {
  int64_t M, N, K;
};
const Shape kShapes[] = {{1, 1, 1}, {7, 5, 3}, {64, 96, 128}, {33, 257, 65}};
const LowPrecisionEngine kEngines[] = {LowPrecisionEngine::NativeBf16,
                                       LowPrecisionEngine::WidenToFp32};

std::vector<bf16_t> bf16_of(const std::vector<float>& x) {
  std::vector<bf16_t> y(x.size());
  fp32_to_bf16(y.data(), x.data(), static_cast<int64_t>(x.size()));
  return y;
}

// Runs body once under each low-precision engine, then restores the measured choice.
template <class Body>
void for_each_engine(Body body) {
  const LowPrecisionEngine chosen = low_precision_engine();
  for (LowPrecisionEngine e : kEngines) {
    SCOPED_TRACE(std::string(engine_name(e)));
    set_low_precision_engine(e);
    body();
  }
  set_low_precision_engine(chosen);
}

TEST(GemmF32, MatchesReferenceForAllTransposes) {
  for (const Shape& s : kShapes) {
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        const auto A = test::random_normal(s.M * s.K, 1), B = test::random_normal(s.K * s.N, 2);
        auto C = test::random_normal(s.M * s.N, 3);
        auto want = C;
        for (float beta : {0.0f, 1.0f}) {
          gemm_f32(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), B.data(), beta, C.data());
          ref::gemm(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), B.data(), beta, want.data());
          expect_within_fp32_accumulation(C, A, B, ta, tb, s.M, s.N, s.K, 0.5f, want);
        }
      }
    }
  }
}

TEST(GemmBf16, MatchesReferenceOnTheRoundedOperands) {
  for_each_engine([] {
    for (const Shape& s : kShapes) {
      for (Trans ta : {Trans::N, Trans::T}) {
        for (Trans tb : {Trans::N, Trans::T}) {
          auto A = test::random_normal(s.M * s.K, 4), B = test::random_normal(s.K * s.N, 5);
          std::vector<bf16_t> a16(A.size()), b16(B.size());
          fp32_to_bf16(a16.data(), A.data(), static_cast<int64_t>(A.size()));
          fp32_to_bf16(b16.data(), B.data(), static_cast<int64_t>(B.size()));
          for (size_t i = 0; i < A.size(); ++i) A[i] = bf16_to_float(a16[i]);
          for (size_t i = 0; i < B.size(); ++i) B[i] = bf16_to_float(b16[i]);
          std::vector<float> C(static_cast<size_t>(s.M * s.N), 1.0f), want = C;
          gemm_bf16(ta, tb, s.M, s.N, s.K, 2.0f, a16.data(), b16.data(), 1.0f, C.data());
          ref::gemm(ta, tb, s.M, s.N, s.K, 2.0f, A.data(), B.data(), 1.0f, want.data());
          // bf16 x bf16 products are exact in FP32, so only the accumulation differs.
          expect_within_fp32_accumulation(C, A, B, ta, tb, s.M, s.N, s.K, 2.0f, want);
        }
      }
    }
  });
}

// An FP8 GEMM's alpha (the operands' scale_inv product) multiplies the finished FP32 sum once,
// as cuBLASLt's FP8 GEMM scales its accumulator: C = round(acc * alpha) + round(beta * C), acc
// being what alpha 1 gives, at any K (oneDNN's own alpha path rounded per block of K).
// Every transpose, on one thread and all, at the models' shapes and at small products with a
// long K (where a GEMM may split K between threads).
TEST(GemmBf16, AppliesAlphaOnceToTheFinishedSum) {
  const LowPrecisionEngine chosen = low_precision_engine();
  set_low_precision_engine(LowPrecisionEngine::NativeBf16);
  const int threads = omp_get_max_threads();
  for (const int t : {1, threads}) {
    omp_set_num_threads(t);
    for (const Shape& s :
         {Shape{64, 96, 128}, Shape{48, 80, 2048}, Shape{200, 64, 4096}, Shape{16, 16, 8192},
          Shape{2, 96, 128}, Shape{128, 128, 16}, Shape{512, 768, 256}, Shape{256, 512, 1024}}) {
      const auto a16 = bf16_of(test::random_normal(s.M * s.K, 8));
      const auto b16 = bf16_of(test::random_normal(s.K * s.N, 9));
      const float alpha = 0.3f;
      for (const auto& [ta, tb] : {std::pair{Trans::N, Trans::T}, std::pair{Trans::N, Trans::N},
                                   std::pair{Trans::T, Trans::N}, std::pair{Trans::T, Trans::T}}) {
        std::vector<float> acc(static_cast<size_t>(s.M * s.N));
        gemm_bf16(ta, tb, s.M, s.N, s.K, 1.0f, a16.data(), b16.data(), 0.0f, acc.data());
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          const std::vector<float> C0 = test::random_normal(s.M * s.N, 10);
          std::vector<float> C = C0, want(C0.size());
          gemm_bf16(ta, tb, s.M, s.N, s.K, alpha, a16.data(), b16.data(), beta, C.data());
          for (size_t i = 0; i < want.size(); ++i) {
            const float scaled = acc[i] * alpha;
            want[i] = beta == 0.0f ? scaled : scaled + beta * C0[i];
          }
          EXPECT_TRUE(test::same_bits(C, want))
              << s.M << "x" << s.N << "x" << s.K << " ta " << (ta == Trans::T) << " tb "
              << (tb == Trans::T) << " beta=" << beta << " threads " << t;
        }
      }
    }
  }
  omp_set_num_threads(threads);
  set_low_precision_engine(chosen);
}

// With AMX tiles a BF16 product of 32 <= K <= 512, M and N >= 64, beta 0 runs on oneDNN's
// brgemm kernels, alpha in their epilogue, rather than on gemm:jit with run_matmul's pass for
// alpha: for speed alone, the two give the same bits, on one thread or all. Outside those bounds
// (where their bits differ) gemm:jit runs it.
TEST(GemmBf16, BrgemmAndGemmJitGiveTheSameBits) {
  if (!cpu_features().amx_bf16) GTEST_SKIP() << "no AMX: every product runs on gemm:jit";
  const LowPrecisionEngine chosen = low_precision_engine();
  set_low_precision_engine(LowPrecisionEngine::NativeBf16);
  const int threads = omp_get_max_threads();
  for (const Shape& s : {Shape{2048, 1024, 256}, Shape{256, 384, 512}, Shape{64, 257, 65},
                         Shape{1000, 333, 500}, Shape{128, 64, 32}}) {
    const auto a16 = bf16_of(test::random_normal(s.M * s.K, 11));
    const auto b16 = bf16_of(test::random_normal(s.K * s.N, 12));
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        for (const int t : {1, threads}) {
          SCOPED_TRACE(::testing::Message()
                       << s.M << "x" << s.N << "x" << s.K << " ta " << (ta == Trans::T) << " tb "
                       << (tb == Trans::T) << " threads " << t);
          omp_set_num_threads(t);
          std::vector<float> C[2];
          std::string kernel[2];
          for (int jit = 0; jit < 2; ++jit) {
            allow_bf16_brgemm(jit == 0);
            kernel[jit] = gemm_implementation(ta, tb, s.M, s.N, s.K, 0.0f);
            C[jit].assign(static_cast<size_t>(s.M * s.N), 7.0f);
            gemm_bf16(ta, tb, s.M, s.N, s.K, 0.3f, a16.data(), b16.data(), 0.0f, C[jit].data());
          }
          allow_bf16_brgemm(true);
          EXPECT_NE(kernel[0], kernel[1]);
          EXPECT_TRUE(test::same_bits(C[0], C[1]));
        }
      }
    }
  }
  omp_set_num_threads(threads);
  for (const Shape& s : {Shape{2048, 1024, 1024}, Shape{2, 96, 128}, Shape{128, 128, 16}}) {
    const std::string brgemm_allowed = gemm_implementation(Trans::N, Trans::T, s.M, s.N, s.K, 0);
    allow_bf16_brgemm(false);
    EXPECT_EQ(brgemm_allowed, gemm_implementation(Trans::N, Trans::T, s.M, s.N, s.K, 0))
        << s.M << "x" << s.N << "x" << s.K;
    allow_bf16_brgemm(true);
  }
  EXPECT_EQ(gemm_implementation(Trans::N, Trans::T, 256, 256, 256, 1.0f),
            gemm_implementation(Trans::N, Trans::T, 2048, 2048, 2048, 1.0f));
  set_low_precision_engine(chosen);
}

TEST(GemmFp8, EqualsTheProductOfDecodedOperandsTimesScaleInvs) {
  for_each_engine([] {
    for (const Shape& s : kShapes) {
      for (DType fb : {DType::E4M3, DType::E5M2}) {
        const auto X = test::random_normal(s.M * s.K, 6), W = test::random_normal(s.K * s.N, 7);
        std::vector<uint8_t> qa(X.size()), qb(W.size());
        const float sa = 64.0f, sb = 16.0f;
        quantize(qa.data(), X.data(), static_cast<int64_t>(X.size()), sa, DType::E4M3);
        quantize(qb.data(), W.data(), static_cast<int64_t>(W.size()), sb, fb);
        std::vector<float> A(X.size()), B(W.size());
        dequantize(A.data(), qa.data(), static_cast<int64_t>(A.size()), 1.0f, DType::E4M3);
        dequantize(B.data(), qb.data(), static_cast<int64_t>(B.size()), 1.0f, fb);
        std::vector<float> C(static_cast<size_t>(s.M * s.N)), want = C;
        const float alpha = (1.0f / sa) * (1.0f / sb);
        gemm_fp8(Trans::N, Trans::T, s.M, s.N, s.K, alpha, qa.data(), DType::E4M3, qb.data(), fb,
                 0.0f, C.data());
        ref::gemm(Trans::N, Trans::T, s.M, s.N, s.K, alpha, A.data(), B.data(), 0.0f, want.data());
        expect_within_fp32_accumulation(C, A, B, Trans::N, Trans::T, s.M, s.N, s.K, alpha, want);
      }
    }
  });
}

// An FP8 operand whose decoded BF16 values come with it (Fp8Out::decoded) is multiplied as
// those: the bits of decoding its codes in the call, without reading the codes (zeros here)
// or decoding anything.
TEST(GemmFp8, TakesTheDecodedValuesThatComeWithTheCodes) {
  for_each_engine([] {
    for (const Shape& s : kShapes) {
      const auto X = test::random_normal(s.M * s.K, 12), W = test::random_normal(s.K * s.N, 13);
      std::vector<uint8_t> qa(X.size()), qb(W.size());
      quantize(qa.data(), X.data(), static_cast<int64_t>(X.size()), 64.0f, DType::E4M3);
      quantize(qb.data(), W.data(), static_cast<int64_t>(W.size()), 16.0f, DType::E5M2);
      std::vector<bf16_t> a16(X.size()), b16(W.size());
      fp8_to_bf16(a16.data(), qa.data(), static_cast<int64_t>(qa.size()), DType::E4M3);
      fp8_to_bf16(b16.data(), qb.data(), static_cast<int64_t>(qb.size()), DType::E5M2);
      std::vector<float> want(static_cast<size_t>(s.M * s.N), 0.5f), got = want;
      gemm_fp8(Trans::N, Trans::T, s.M, s.N, s.K, 0.25f, qa.data(), DType::E4M3, qb.data(),
               DType::E5M2, 1.0f, want.data());
      const std::vector<uint8_t> zeros_a(qa.size()), zeros_b(qb.size());
      reset_gemm_stats();
      gemm_fp8(Trans::N, Trans::T, s.M, s.N, s.K, 0.25f, zeros_a.data(), DType::E4M3,
               zeros_b.data(), DType::E5M2, 1.0f, got.data(), a16.data(), b16.data());
      EXPECT_TRUE(test::same_bits(got, want)) << s.M << "x" << s.N << "x" << s.K;
      EXPECT_EQ(gemm_stats().fp8_values_decoded, 0);
    }
  });
}

// The CPU backend's per-tensor cast: fp8lm::quantize's codes and statistics whatever the
// thread count (threads take shares; a max and integer sums combine exactly), and, where
// asked, each code's value as BF16 beside it.
TEST(QuantizeFp8, EqualsOneQuantizeCallAndDecodesItsCodes) {
  const int64_t n = (int64_t{1} << 16) + 77;  // past the parallel threshold, a ragged tail
  const auto x = test::random_with_specials(static_cast<size_t>(n), 14);
  const int threads = omp_get_max_threads();
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    for (DType f : {DType::E4M3, DType::E5M2}) {
      for (bool decode : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << t << " threads, " << dtype_name(f) << ", decode " << decode);
        std::vector<uint8_t> want(static_cast<size_t>(n)), got(want.size());
        std::vector<bf16_t> values(want.size());
        const CastStats w = quantize(want.data(), x.data(), n, 3.5f, f);
        const CastStats g =
            quantize_fp8(got.data(), decode ? values.data() : nullptr, x.data(), n, 3.5f, f);
        EXPECT_EQ(got, want);
        EXPECT_EQ(g.amax, w.amax);
        EXPECT_EQ(g.saturated, w.saturated);
        EXPECT_EQ(g.flushed, w.flushed);
        EXPECT_GT(w.saturated, 0) << "the input should exercise the counts";
        if (!decode) continue;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(values[i], bf16_from_float(fp8_decode(want[i], f))) << i;
        }
      }
    }
    EXPECT_EQ(absmax_parallel(x.data(), n), absmax(x.data(), n));
  }
  omp_set_num_threads(threads);
}

// The descriptor entry is the typed kernels, nothing else: the same bits for each dtype pair,
// with FP8's scale_invs folded into alpha as alpha * sa * sb; its traffic counted; a mix of
// dtypes refused.
TEST(GemmOperands, DispatchesToTheTypedKernelBitForBit) {
  const Shape s{17, 33, 40};
  const auto X = test::random_normal(s.M * s.K, 8), W = test::random_normal(s.K * s.N, 9);
  std::vector<bf16_t> x16(X.size()), w16(W.size());
  fp32_to_bf16(x16.data(), X.data(), static_cast<int64_t>(X.size()));
  fp32_to_bf16(w16.data(), W.data(), static_cast<int64_t>(W.size()));
  std::vector<uint8_t> qx(X.size()), qw(W.size());
  quantize(qx.data(), X.data(), static_cast<int64_t>(X.size()), 32.0f, DType::E4M3);
  quantize(qw.data(), W.data(), static_cast<int64_t>(W.size()), 8.0f, DType::E5M2);
  const float sx = 1.0f / 32.0f, sw = 1.0f / 8.0f;
  const auto n = static_cast<size_t>(s.M * s.N);
  std::vector<float> got(n, 1.0f), want(n, 1.0f);
  gemm(Trans::N, Trans::T, s.M, s.N, s.K, 0.5f, {X.data(), DType::F32}, {W.data(), DType::F32},
       1.0f, got.data());
  gemm_f32(Trans::N, Trans::T, s.M, s.N, s.K, 0.5f, X.data(), W.data(), 1.0f, want.data());
  EXPECT_TRUE(test::same_bits(got, want));
  gemm(Trans::N, Trans::T, s.M, s.N, s.K, 0.5f, {x16.data(), DType::BF16},
       {w16.data(), DType::BF16}, 0.0f, got.data());
  gemm_bf16(Trans::N, Trans::T, s.M, s.N, s.K, 0.5f, x16.data(), w16.data(), 0.0f, want.data());
  EXPECT_TRUE(test::same_bits(got, want));
  reset_traffic();
  gemm(Trans::N, Trans::T, s.M, s.N, s.K, 0.5f, {qx.data(), DType::E4M3, &sx},
       {qw.data(), DType::E5M2, &sw}, 0.0f, got.data());
  EXPECT_EQ(traffic_bytes(), gemm_traffic(s.M, s.N, s.K, 1, 1, false));
  gemm_fp8(Trans::N, Trans::T, s.M, s.N, s.K, 0.5f * sx * sw, qx.data(), DType::E4M3, qw.data(),
           DType::E5M2, 0.0f, want.data());
  EXPECT_TRUE(test::same_bits(got, want));
  EXPECT_THROW(gemm(Trans::N, Trans::T, s.M, s.N, s.K, 1.0f, {X.data(), DType::F32},
                    {w16.data(), DType::BF16}, 0.0f, got.data()),
               Error);
  EXPECT_THROW(gemm(Trans::N, Trans::T, s.M, s.N, s.K, 1.0f, {qx.data(), DType::E4M3},
                    {qw.data(), DType::E5M2}, 0.0f, got.data()),
               Error);  // FP8 without its scale_invs
}

// The conversions as callers get them (dispatched to the best ISA, threads sharing the work),
// and each SIMD body this CPU runs, called directly: every one is checked.
struct CastSet {
  const char* name;
  void (*bf16_to_f32)(float*, const bf16_t*, int64_t);
  void (*fp8_to_f32)(float*, const uint8_t*, int64_t, DType);
  void (*fp8_to_bf16)(bf16_t*, const uint8_t*, int64_t, DType);
  void (*fp32_to_bf16)(bf16_t*, const float*, int64_t);
};

std::vector<CastSet> cast_sets() {
  std::vector<CastSet> sets = {
      {"dispatched", cpu::bf16_to_f32, cpu::fp8_to_f32, cpu::fp8_to_bf16, cpu::fp32_to_bf16}};
  if (cpu_features().avx2)
    sets.push_back(
        {"avx2", avx2::bf16_to_f32, avx2::fp8_to_f32, avx2::fp8_to_bf16, avx2::fp32_to_bf16});
  if (cpu_features().avx512)
    sets.push_back({"avx512", avx512::bf16_to_f32, avx512::fp8_to_f32, avx512::fp8_to_bf16,
                    avx512::fp32_to_bf16});
  return sets;
}

// Converts x[offset, offset + n) with cast and checks each code against bf16_from_float, and
// that the codes either side were left alone.
void expect_cast_matches(void (*cast)(bf16_t*, const float*, int64_t), const std::vector<float>& x,
                         int64_t offset, int64_t n) {
  constexpr bf16_t kUntouched = 0xdead;
  std::vector<bf16_t> y(x.size() + 1, kUntouched);
  cast(y.data() + offset, x.data() + offset, n);
  for (int64_t i = 0; i < offset; ++i) ASSERT_EQ(y[i], kUntouched) << "before the range";
  for (int64_t i = offset; i < offset + n; ++i)
    ASSERT_EQ(y[i], bf16_from_float(x[i]))
        << std::hex << "input 0x" << std::bit_cast<uint32_t>(x[i]) << std::dec << " n=" << n
        << " i=" << i;
  ASSERT_EQ(y[offset + n], kUntouched) << "after the range";
}

TEST(Fp32ToBf16, EqualsBf16FromFloatBitForBit) {
  const std::vector<float> x = test::bf16_cast_inputs(1 << 18, 10);
  const int64_t all = static_cast<int64_t>(x.size()) - 1;
  // Partial vectors of every width, at aligned and unaligned starts, and lengths that split
  // into several threads' chunks.
  std::vector<int64_t> lengths = {0, 100003, 1 << 14, (1 << 14) + 1, all};
  for (int64_t n = 1; n <= 33; ++n) lengths.push_back(n);
  for (int64_t offset : {0, 1}) {
    for (int64_t n : lengths) {
      SCOPED_TRACE(testing::Message() << "offset=" << offset << " n=" << n);
      for (const CastSet& c : cast_sets()) {
        SCOPED_TRACE(c.name);
        expect_cast_matches(c.fp32_to_bf16, x, offset, n);
      }
    }
  }
}

// A length whose per-thread share is a whole number of cache lines with a remainder left over
// (n = threads * 32768 + 1): every thread's share rounded to 64 elements must still cover the
// last element.
TEST(Fp32ToBf16, CoversTheTailWhateverTheThreadCount) {
  const int saved = omp_get_max_threads();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const int64_t n = threads * 32768 + 1;
    const std::vector<float> x = test::random_normal(n + 1, 11);
    SCOPED_TRACE(testing::Message() << "threads=" << threads << " n=" << n);
    expect_cast_matches(fp32_to_bf16, x, 0, n);
  }
  omp_set_num_threads(saved);
}

TEST(GemmF32, RepeatedCallsAreBitIdentical) {
  const auto A = test::random_normal(128 * 256, 8), B = test::random_normal(256 * 192, 9);
  std::vector<float> C1(128 * 192), C2(128 * 192);
  gemm_f32(Trans::N, Trans::T, 128, 192, 256, 1.0f, A.data(), B.data(), 0.0f, C1.data());
  gemm_f32(Trans::N, Trans::T, 128, 192, 256, 1.0f, A.data(), B.data(), 0.0f, C2.data());
  EXPECT_EQ(C1, C2);
}

TEST(GemmStats, CountTheFlopsOfEveryProduct) {
  const auto A = test::random_normal(16 * 8, 10), B = test::random_normal(8 * 4, 11);
  std::vector<float> C(16 * 4);
  std::vector<uint8_t> qa(A.size(), 0x38), qb(B.size(), 0x38);
  reset_gemm_stats();
  gemm_f32(Trans::N, Trans::N, 16, 4, 8, 1.0f, A.data(), B.data(), 0.0f, C.data());
  gemm_fp8(Trans::N, Trans::N, 16, 4, 8, 1.0f, qa.data(), DType::E4M3, qb.data(), DType::E4M3, 0.0f,
           C.data());
  gemm_f32(Trans::N, Trans::N, 0, 4, 8, 1.0f, A.data(), B.data(), 0.0f, C.data());  // empty
  EXPECT_EQ(gemm_stats().flops, 2 * (2.0 * 16 * 4 * 8));
  EXPECT_EQ(gemm_stats().fp8_values_decoded, 16 * 8 + 8 * 4);  // both FP8 operands
  EXPECT_GT(gemm_stats().seconds, 0.0);
  // 0x38 is 1.0 in E4M3: every output is K = 8.
  for (float c : C) EXPECT_EQ(c, 8.0f);
}

// n FP8 codes for the decode tests: every code once at n = 256, else a stride through them.
std::vector<uint8_t> code_pattern(int64_t n) {
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    codes[i] = static_cast<uint8_t>(n == 256 ? i : (i * 37 + 11) & 0xff);
  return codes;
}

// Widening is exact, so the fast converters equal the reference decode bit for bit: every
// FP8 code (NaN codes stay NaN, their sign kept), and BF16 patterns from every exponent, at lengths
// that leave vector tails.
TEST(Upcast, Fp8CodesDecodeExactly) {
  for (DType f : {DType::E4M3, DType::E5M2}) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{256}, int64_t{40000}}) {
      const std::vector<uint8_t> codes = code_pattern(n);
      std::vector<float> want(codes.size());
      ref::fp8_to_f32(want.data(), codes.data(), n, f);
      for (const CastSet& c : cast_sets()) {
        std::vector<float> got(codes.size());
        c.fp8_to_f32(got.data(), codes.data(), n, f);
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << c.name << " code " << int{codes[i]};
            ASSERT_EQ(std::signbit(got[i]), std::signbit(want[i])) << c.name;
          } else {
            ASSERT_TRUE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]))
                << c.name << " code " << int{codes[i]} << " got " << got[i];
          }
        }
      }
    }
  }
}

// An FP8 value is exact in BF16, so the vector decode to BF16 equals the BF16 of the reference
// decode bit for bit, NaN codes included (their sign kept), at lengths that leave tails.
TEST(Upcast, Fp8CodesToBf16EqualTheReferenceBits) {
  for (DType f : {DType::E4M3, DType::E5M2}) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{256}, int64_t{40000}}) {
      const std::vector<uint8_t> codes = code_pattern(n);
      for (const CastSet& c : cast_sets()) {
        std::vector<bf16_t> got(codes.size());
        c.fp8_to_bf16(got.data(), codes.data(), n, f);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], bf16_from_float(fp8_decode(codes[i], f)))
              << c.name << " code " << int{codes[i]};
      }
    }
  }
}

TEST(Upcast, Bf16WidensExactly) {
  const int64_t n = 65536 + 13;
  std::vector<bf16_t> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<bf16_t>(i * 7919);
  std::vector<float> want(x.size());
  ref::bf16_to_f32(want.data(), x.data(), n);
  for (const CastSet& c : cast_sets()) {
    std::vector<float> got(x.size());
    c.bf16_to_f32(got.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]))
          << c.name << " bits " << x[i];
  }
}

}  // namespace
}  // namespace fp8lm::cpu
