// cuBLASLt GEMMs (kernels/cuda/gemm.h) against the CPU GEMMs on identical operands: FP32 for
// every transpose, alpha and beta; BF16 and FP8 on the same codes; the strided-batched
// BF16 GEMM of attention against a loop of CPU GEMMs. Also the FP8 misuse that must throw
// before any device work (those tests need no GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "cuda_test_util.h"
#include "fp8/quantize.h"
#include "fp8lm/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/gemm.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;

// |got - want| <= per_unit * mag + 1e-30 everywhere.
void expect_within(const Vec& got, const Vec& want, const Vec& mag, double per_unit,
                   const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], per_unit * mag[i] + 1e-30) << what << " at " << i;
}

std::vector<bf16_t> to_bf16(const Vec& x) {
  std::vector<bf16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_from_float(x[i]);
  return y;
}
Vec from_bf16(const std::vector<bf16_t>& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_float(x[i]);
  return y;
}

struct Shape {
  int64_t M, N, K;
};
const Shape kShapes[] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 96, 128}};

TEST(CudaGemm, F32MatchesReferenceForAllTransposesAlphaAndBeta) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape& s : kShapes) {
    const auto A = test::randn(static_cast<size_t>(s.M * s.K), 1);
    const auto B = test::randn(static_cast<size_t>(s.K * s.N), 2);
    const auto C0 = test::randn(static_cast<size_t>(s.M * s.N), 3);
    const auto d_A = to_device(A), d_B = to_device(B);
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(testing::Message()
                       << s.M << "x" << s.N << "x" << s.K << " ta " << (ta == Trans::T) << " tb "
                       << (tb == Trans::T) << " beta " << beta);
          Vec want = C0;
          cpu::ref::gemm(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), B.data(), beta, want.data());
          auto d_C = to_device(C0);
          cuda::gemm(ta, tb, s.M, s.N, s.K, 0.5f, {d_A.data(), DType::F32},
                     {d_B.data(), DType::F32}, beta, d_C.data(), nullptr);
          const auto got = to_host(d_C.data(), C0.size());
          // FP32 FMAs in any order and blocking (split-K included) stay within (K + 1) roundings
          // of 2^-24 of the magnitude; alpha and beta add two more (one allowed spare).
          const auto mag =
              test::gemm_magnitudes(ta, tb, s.M, s.N, s.K, 0.5f, A, B, beta, C0, nullptr);
          expect_within(got, want, mag, (static_cast<double>(s.K) + 4) * 0x1p-24, "f32");
        }
      }
    }
  }
}

TEST(CudaGemm, F32WithKZeroIsBetaC) {
  FP8LM_REQUIRE_CUDA();
  const int64_t M = 3, N = 5;
  const auto C0 = test::randn(M * N, 5);
  auto d_C = to_device(C0);
  const float dummy = 0;
  cuda::gemm(Trans::N, Trans::N, M, N, 0, 1.0f, {&dummy, DType::F32}, {&dummy, DType::F32}, 2.0f,
             d_C.data(), nullptr);
  Vec want = C0;
  for (auto& v : want) v *= 2.0f;
  EXPECT_TRUE(test::same_bits(to_host(d_C.data(), C0.size()), want));
}

TEST(CudaGemm, Bf16MatchesCpuOnTheSameCodes) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape& s : kShapes) {
    const auto a16 = to_bf16(test::randn(static_cast<size_t>(s.M * s.K), 7));
    const auto b16 = to_bf16(test::randn(static_cast<size_t>(s.K * s.N), 8));
    const Vec A = from_bf16(a16), B = from_bf16(b16);
    const auto C0 = test::randn(static_cast<size_t>(s.M * s.N), 9);
    const auto d_A = to_device(a16), d_B = to_device(b16);
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        SCOPED_TRACE(testing::Message() << s.M << "x" << s.N << "x" << s.K << " ta "
                                        << (ta == Trans::T) << " tb " << (tb == Trans::T));
        Vec want = C0;
        cpu::gemm_bf16(ta, tb, s.M, s.N, s.K, 2.0f, a16.data(), b16.data(), 1.0f, want.data());
        auto d_C = to_device(C0);
        cuda::gemm(ta, tb, s.M, s.N, s.K, 2.0f, {d_A.data(), DType::BF16},
                   {d_B.data(), DType::BF16}, 1.0f, d_C.data(), nullptr);
        // Products of BF16 values are exact in FP32; only the sums differ. Tensor cores may
        // truncate instead of round in their adders (Fasi et al. 2021), so each side is within
        // (K + 4) * 2^-23 of the magnitude from the exact result, twice that from each other.
        const auto mag =
            test::gemm_magnitudes(ta, tb, s.M, s.N, s.K, 2.0f, A, B, 1.0f, C0, nullptr);
        expect_within(to_host(d_C.data(), C0.size()), want, mag,
                      2 * (static_cast<double>(s.K) + 4) * 0x1p-23, "bf16");
      }
    }
  }
}

// FP8 GEMMs, C[M, N] = A[M, K] · B[N, K]ᵀ on codes with device scale_invs.
struct Fp8Case {
  DType fa, fb;
};
// Forward (activation x weight), dgrad/wgrad (E5M2 gradient in A), and E5M2 in B.
const Fp8Case kFp8Cases[] = {
    {DType::E4M3, DType::E4M3}, {DType::E5M2, DType::E4M3}, {DType::E4M3, DType::E5M2}};

Vec run_gpu_fp8(int64_t M, int64_t N, int64_t K, const std::vector<uint8_t>& qa, DType fa,
                float sa_inv, const std::vector<uint8_t>& qb, DType fb, float sb_inv, float beta,
                const Vec& C0) {
  const auto d_A = to_device(qa), d_B = to_device(qb);
  const auto d_sa = to_device(Vec{sa_inv}), d_sb = to_device(Vec{sb_inv});
  auto d_C = to_device(C0);
  cuda::gemm(Trans::N, Trans::T, M, N, K, 1.0f, {d_A.data(), fa, d_sa.data()},
             {d_B.data(), fb, d_sb.data()}, beta, d_C.data(), nullptr);
  return to_host(d_C.data(), C0.size());
}

// Operand values from {0, ±0.5, ±1, ±1.5, ±2}: with K = 64 every partial sum is a multiple of
// 0.25 below 2^8 in magnitude, exact in any accumulator of 11 or more bits (Hopper's FP8 tensor
// cores keep about 14), and the power-of-two scale_invs and beta * C0 add no rounding either. So
// every summation order gives the same values (the sign of a zero aside).
TEST(CudaGemm, Fp8OnExactlySummableCodesEqualsCpuExactly) {
  FP8LM_REQUIRE_CUDA_FP8();
  const int64_t M = 32, N = 48, K = 64;
  const float values[] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 1.5f, -1.5f, 2.0f, -2.0f};
  auto pick = [&](size_t n, uint32_t seed) {
    std::vector<float> v(n);
    uint32_t state = seed;
    for (auto& x : v) {
      state = state * 1664525u + 1013904223u;
      x = values[(state >> 16) % 9];
    }
    return v;
  };
  const Vec C0 = pick(static_cast<size_t>(M * N), 21);
  for (const Fp8Case& c : kFp8Cases) {
    const Vec X = pick(static_cast<size_t>(M * K), 23), W = pick(static_cast<size_t>(N * K), 24);
    std::vector<uint8_t> qa(X.size()), qb(W.size());
    quantize(qa.data(), X.data(), static_cast<int64_t>(X.size()), 1.0f, c.fa);
    quantize(qb.data(), W.data(), static_cast<int64_t>(W.size()), 1.0f, c.fb);
    const float sa_inv = 0.5f, sb_inv = 4.0f;
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(testing::Message() << dtype_short_name(c.fa) << " x " << dtype_short_name(c.fb)
                                      << " beta " << beta);
      Vec want = C0;
      cpu::gemm_fp8(Trans::N, Trans::T, M, N, K, sa_inv * sb_inv, qa.data(), c.fa, qb.data(), c.fb,
                    beta, want.data());
      const Vec got = run_gpu_fp8(M, N, K, qa, c.fa, sa_inv, qb, c.fb, sb_inv, beta, C0);
      test::expect_close(got, want, 0.0f, 0.0f, "fp8 exact");
    }
  }
}

TEST(CudaGemm, Fp8MatchesCpuOnRandomCodes) {
  FP8LM_REQUIRE_CUDA_FP8();
  for (const Shape& s : {Shape{16, 16, 16}, Shape{48, 80, 128}, Shape{128, 64, 256}}) {
    for (const Fp8Case& c : kFp8Cases) {
      const Vec X = test::randn(static_cast<size_t>(s.M * s.K), 31);
      const Vec W = test::randn(static_cast<size_t>(s.N * s.K), 32, 0.05f);
      const Vec C0 = test::randn(static_cast<size_t>(s.M * s.N), 33);
      // Scales that are not powers of two, so the scale_invs really scale the mantissas.
      const float sa = 37.0f, sb = 1300.0f;
      std::vector<uint8_t> qa(X.size()), qb(W.size());
      quantize(qa.data(), X.data(), static_cast<int64_t>(X.size()), sa, c.fa);
      quantize(qb.data(), W.data(), static_cast<int64_t>(W.size()), sb, c.fb);
      Vec A(X.size()), B(W.size());
      dequantize(A.data(), qa.data(), static_cast<int64_t>(A.size()), 1.0f, c.fa);
      dequantize(B.data(), qb.data(), static_cast<int64_t>(B.size()), 1.0f, c.fb);
      const float alpha = (1.0f / sa) * (1.0f / sb);
      SCOPED_TRACE(testing::Message() << s.M << "x" << s.N << "x" << s.K << " "
                                      << dtype_short_name(c.fa) << " x " << dtype_short_name(c.fb));
      Vec want = C0;
      cpu::gemm_fp8(Trans::N, Trans::T, s.M, s.N, s.K, alpha, qa.data(), c.fa, qb.data(), c.fb,
                    1.0f, want.data());
      const Vec got =
          run_gpu_fp8(s.M, s.N, s.K, qa, c.fa, 1.0f / sa, qb, c.fb, 1.0f / sb, 1.0f, C0);
      // The products are exact; the sums are not. The CPU adds in FP32; Hopper's FP8 tensor
      // cores keep about 14 bits in their accumulator between promotions to FP32 (DeepSeek-V3
      // report, 3.3.2): up to 2^-13 of the magnitude per addition, K additions, plus a few
      // roundings of scale_inv, alpha and beta.
      const Vec mag =
          test::gemm_magnitudes(Trans::N, Trans::T, s.M, s.N, s.K, alpha, A, B, 1.0f, C0, nullptr);
      expect_within(got, want, mag, (static_cast<double>(s.K) + 4) * 0x1p-13, "fp8");
    }
  }
}

TEST(CudaGemm, RepeatedCallsGiveTheSameBits) {
  FP8LM_REQUIRE_CUDA();
  const int64_t M = 64, N = 96, K = 128;
  const auto A = test::randn(M * K, 41), B = test::randn(K * N, 42);
  const auto d_A = to_device(A), d_B = to_device(B);
  DeviceBuffer<float> d_C(static_cast<size_t>(M * N));
  Vec first;
  for (int run = 0; run < 3; ++run) {  // run 0 builds the plan, runs 1 and 2 reuse it
    cuda::gemm(Trans::N, Trans::T, M, N, K, 1.0f, {d_A.data(), DType::F32},
               {d_B.data(), DType::F32}, 0.0f, d_C.data(), nullptr);
    const Vec got = to_host(d_C.data(), static_cast<size_t>(M * N));
    if (run == 0) first = got;
    EXPECT_TRUE(test::same_bits(got, first)) << "run " << run;
  }
}

// Misuse is rejected before any device work, so these run (and pass) without a GPU: host checks
// of the wrapper, not GPU tests, hence a suite name without the Cuda prefix. The pointers are
// never dereferenced.
const auto* const kFake = reinterpret_cast<const void*>(uintptr_t{4096});
float* const kFakeC = reinterpret_cast<float*>(uintptr_t{8192});

void fp8_call(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, DType a, DType b) {
  cuda::gemm(ta, tb, M, N, K, 1.0f, {kFake, a}, {kFake, b}, 0.0f, kFakeC, nullptr);
}

TEST(GemmArguments, Fp8OtherThanTnThrows) {
  for (auto [ta, tb] : {std::pair{Trans::N, Trans::N}, std::pair{Trans::T, Trans::N},
                        std::pair{Trans::T, Trans::T}}) {
    EXPECT_THROW(fp8_call(ta, tb, 16, 16, 16, DType::E4M3, DType::E4M3), Error);
  }
}

TEST(GemmArguments, Fp8SizesNotMultiplesOf16Throw) {
  for (auto [M, N, K] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 16, 16}, {16, 24, 16}, {16, 16, 40}}) {
    EXPECT_THROW(fp8_call(Trans::N, Trans::T, M, N, K, DType::E4M3, DType::E4M3), Error);
  }
}

TEST(GemmArguments, UnsupportedTypeCombinationsThrow) {
  EXPECT_THROW(fp8_call(Trans::N, Trans::T, 16, 16, 16, DType::E5M2, DType::E5M2), Error);
  EXPECT_THROW(fp8_call(Trans::N, Trans::T, 16, 16, 16, DType::E4M3, DType::BF16), Error);
  EXPECT_THROW(fp8_call(Trans::N, Trans::T, 16, 16, 16, DType::F32, DType::BF16), Error);
}

// Attention's plain path: per head h, S_h = Q_h · K_hᵀ and O_h = P_h · V_h, where Q, K and V
// are column blocks of one row-major [T, 3 * H * hd] buffer (row stride 3 * H * hd, head
// stride hd) and O is [T, H * hd]. The reference copies each head out and runs the plain CPU
// GEMM on the decoded values.
TEST(CudaGemm, BatchedBf16MatchesALoopOfCpuGemms) {
  FP8LM_REQUIRE_CUDA();
  const int64_t T = 37, H = 3, hd = 16, row = 3 * H * hd;
  const auto qkv16 = to_bf16(test::randn(static_cast<size_t>(T * row), 51));
  const auto p16 = to_bf16(test::randn(static_cast<size_t>(H * T * T), 52));
  const Vec qkv = from_bf16(qkv16), P = from_bf16(p16);
  const auto d_qkv = to_device(qkv16), d_p = to_device(p16);
  auto head = [&](int64_t col0) {  // a [T, hd] block of qkv
    Vec m(static_cast<size_t>(T * hd));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < hd; ++d) m[t * hd + d] = qkv[t * row + col0 + d];
    return m;
  };
  // Products of BF16 values are exact; sums within (K + 4) * 2^-23 of the magnitude (tensor
  // cores may truncate); a BF16 output adds one rounding of at most 2^-9 relative (2^-8
  // allowed, through the magnitude, which bounds |want|).
  for (bool c_bf16 : {false, true}) {
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(testing::Message() << "c_bf16 " << c_bf16 << " beta " << beta);
      // S = Q Kᵀ / 4 into a packed [H, T, T].
      const Vec S0 = from_bf16(to_bf16(test::randn(static_cast<size_t>(H * T * T), 53)));
      DeviceBuffer<float> d_s32;
      DeviceBuffer<bf16_t> d_s16;
      void* d_s = nullptr;
      if (c_bf16) {
        d_s16 = to_device(to_bf16(S0));
        d_s = d_s16.data();
      } else {
        d_s32 = to_device(S0);
        d_s = d_s32.data();
      }
      cuda::gemm_batched_bf16(Trans::N, Trans::T, T, T, hd, 0.25f, d_qkv.data(), row, hd,
                              d_qkv.data() + H * hd, row, hd, beta, d_s, c_bf16, T, T * T, H,
                              nullptr);
      const Vec s_got =
          c_bf16 ? from_bf16(to_host(d_s16.data(), S0.size())) : to_host(d_s32.data(), S0.size());
      // O = P V into [T, H * hd] (row stride H * hd, head stride hd).
      const Vec O0 = from_bf16(to_bf16(test::randn(static_cast<size_t>(T * H * hd), 54)));
      DeviceBuffer<float> d_o32;
      DeviceBuffer<bf16_t> d_o16;
      void* d_o = nullptr;
      if (c_bf16) {
        d_o16 = to_device(to_bf16(O0));
        d_o = d_o16.data();
      } else {
        d_o32 = to_device(O0);
        d_o = d_o32.data();
      }
      cuda::gemm_batched_bf16(Trans::N, Trans::N, T, hd, T, 1.0f, d_p.data(), T, T * T,
                              d_qkv.data() + 2 * H * hd, row, hd, beta, d_o, c_bf16, H * hd, hd, H,
                              nullptr);
      const Vec o_got =
          c_bf16 ? from_bf16(to_host(d_o16.data(), O0.size())) : to_host(d_o32.data(), O0.size());
      const double out_rounding = c_bf16 ? 0x1p-8 : 0.0;
      for (int64_t h = 0; h < H; ++h) {
        const Vec Q = head(h * hd), K = head(H * hd + h * hd), V = head(2 * H * hd + h * hd);
        const Vec s0(S0.begin() + h * T * T, S0.begin() + (h + 1) * T * T);
        Vec s_want = s0;
        cpu::ref::gemm(Trans::N, Trans::T, T, T, hd, 0.25f, Q.data(), K.data(), beta,
                       s_want.data());
        const Vec s_head(s_got.begin() + h * T * T, s_got.begin() + (h + 1) * T * T);
        const Vec s_mag =
            test::gemm_magnitudes(Trans::N, Trans::T, T, T, hd, 0.25f, Q, K, beta, s0, nullptr);
        expect_within(s_head, s_want, s_mag, (static_cast<double>(hd) + 4) * 0x1p-23 + out_rounding,
                      "Q K^T");

        const Vec Ph(P.begin() + h * T * T, P.begin() + (h + 1) * T * T);
        Vec o0(static_cast<size_t>(T * hd)), o_head(o0.size());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t d = 0; d < hd; ++d) {
            o0[t * hd + d] = O0[t * H * hd + h * hd + d];
            o_head[t * hd + d] = o_got[t * H * hd + h * hd + d];
          }
        }
        Vec o_want = o0;
        cpu::ref::gemm(Trans::N, Trans::N, T, hd, T, 1.0f, Ph.data(), V.data(), beta,
                       o_want.data());
        const Vec o_mag =
            test::gemm_magnitudes(Trans::N, Trans::N, T, hd, T, 1.0f, Ph, V, beta, o0, nullptr);
        expect_within(o_head, o_want, o_mag, (static_cast<double>(T) + 4) * 0x1p-23 + out_rounding,
                      "P V");
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
