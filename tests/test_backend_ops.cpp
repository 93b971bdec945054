// One table of op cases, run on every backend this build has and this process can use, each
// against the plain double-precision reference (as ggml's test-backend-ops checks every
// backend): the backends' shared entries over kernels/tensor.h descriptors must agree with
// the reference within what their accumulation order allows. A backend that lacks a case
// (cuBLASLt takes FP8 only as TN with sizes in multiples of 16) says so in supports().
//
// So far the table holds the GEMM and the norms; the other ops join it as they move onto the shared
// descriptors (docs/ARCHITECTURE.md, "Where it is going").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "fp8/quantize.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/norm_out.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/types.h"
#include "test_util.h"
#ifdef FP8LM_WITH_CUDA
#include "cuda_test_util.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norms.h"
#endif

namespace fp8lm {
namespace {

using Vec = std::vector<float>;

struct GemmCase {
  Trans ta, tb;
  int64_t M, N, K;
  DType a, b;
  float alpha, beta;
  std::string name() const {
    return std::string(ta == Trans::T ? "T" : "N") + (tb == Trans::T ? "T" : "N") + " " +
           std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
           std::string(dtype_name(a)) + "x" + std::string(dtype_name(b)) +
           " beta=" + std::to_string(beta);
  }
};

constexpr Trans N = Trans::N, T = Trans::T;
const GemmCase kGemmCases[] = {
    {N, N, 7, 5, 3, DType::F32, DType::F32, 1.0f, 0.0f},
    {T, N, 33, 17, 65, DType::F32, DType::F32, 0.5f, 1.0f},
    {N, T, 64, 48, 32, DType::F32, DType::F32, 1.0f, 0.0f},
    {T, T, 9, 31, 17, DType::F32, DType::F32, 2.0f, 0.5f},
    {N, T, 33, 17, 65, DType::BF16, DType::BF16, 1.0f, 0.0f},
    {T, N, 16, 32, 48, DType::BF16, DType::BF16, 1.0f, 1.0f},
    // The FP8 GEMMs of a Linear: forward (E4M3 x E4M3), dgrad and wgrad (E5M2 dy x E4M3) as TN
    // on every backend; the NN and TN layouts the CPU also takes without transposed copies.
    {N, T, 32, 48, 64, DType::E4M3, DType::E4M3, 1.0f, 0.0f},
    {N, T, 32, 48, 64, DType::E5M2, DType::E4M3, 1.0f, 1.0f},
    {N, T, 16, 16, 128, DType::E4M3, DType::E5M2, 1.0f, 0.0f},
    {N, N, 17, 9, 33, DType::E5M2, DType::E4M3, 1.0f, 1.0f},
    {T, N, 9, 17, 33, DType::E5M2, DType::E4M3, 1.0f, 1.0f},
};

// One operand as its dtype stores it, and the exact values it stands for.
struct Operand {
  std::vector<uint8_t> bytes;
  Vec values;       // decoded, times scale_inv: what the product multiplies
  float scale_inv;  // FP8; 1 otherwise
};

Operand make_operand(DType t, int64_t n, uint32_t seed, float fp8_scale) {
  const Vec x = test::random_normal(n, seed);
  Operand o{{}, Vec(static_cast<size_t>(n)), 1.0f};
  if (t == DType::F32) {
    o.values = x;
    o.bytes.resize(x.size() * 4);
    std::memcpy(o.bytes.data(), x.data(), o.bytes.size());
  } else if (t == DType::BF16) {
    std::vector<bf16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      h[i] = bf16_from_float(x[i]);
      o.values[i] = bf16_to_float(h[i]);
    }
    o.bytes.resize(h.size() * 2);
    std::memcpy(o.bytes.data(), h.data(), o.bytes.size());
  } else {
    o.bytes.resize(x.size());
    quantize(o.bytes.data(), x.data(), n, fp8_scale, fp8_format_of(t));
    o.scale_inv = 1.0f / fp8_scale;
    for (size_t i = 0; i < x.size(); ++i)
      o.values[i] = fp8_decode(o.bytes[i], fp8_format_of(t)) * o.scale_inv;
  }
  return o;
}

struct GemmInputs {
  Operand a, b;
  Vec c0;
};

// A backend under test: whether this process can use it, which cases it takes, its GEMM, and
// the rounding unit of its accumulator per operand dtype (the tolerance is (K + 4) units of
// the products' magnitude: one rounding per addition, plus alpha, beta and the scale_invs).
struct BackendUnderTest {
  std::string name;
  std::function<bool()> present;
  std::function<bool(const GemmCase&)> supports;
  std::function<Vec(const GemmCase&, const GemmInputs&)> gemm;
  std::function<double(DType)> accumulation_unit;
};

std::vector<BackendUnderTest> backends() {
  std::vector<BackendUnderTest> v;
  v.push_back({"cpu", [] { return true; }, [](const GemmCase&) { return true; },
               [](const GemmCase& c, const GemmInputs& in) {
                 Vec C = in.c0;
                 cpu::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha,
                           {in.a.bytes.data(), c.a, &in.a.scale_inv},
                           {in.b.bytes.data(), c.b, &in.b.scale_inv}, c.beta, C.data());
                 return C;
               },
               // Every product is exact in FP32 and summed in FP32.
               [](DType) { return 0x1p-24; }});
#ifdef FP8LM_WITH_CUDA
  v.push_back({"cuda", [] { return test::cuda_device_present(); },
               [](const GemmCase& c) {
                 if (c.a == DType::BF16) return test::cuda_cc() >= 80;
                 if (!is_fp8(c.a)) return true;
                 return test::cuda_cc() >= 89 && c.ta == N && c.tb == T && c.M % 16 == 0 &&
                        c.N % 16 == 0 && c.K % 16 == 0;
               },
               [](const GemmCase& c, const GemmInputs& in) {
                 const auto d_a = to_device(in.a.bytes), d_b = to_device(in.b.bytes);
                 const auto d_sa = to_device(Vec{in.a.scale_inv}),
                            d_sb = to_device(Vec{in.b.scale_inv});
                 auto d_c = to_device(in.c0);
                 cuda::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, {d_a.data(), c.a, d_sa.data()},
                            {d_b.data(), c.b, d_sb.data()}, c.beta, d_c.data(), {}, nullptr);
                 return to_host(d_c.data(), in.c0.size());
               },
               // FP32: no TF32. BF16 tensor cores sum in FP32 but in their own tree order (2
               // units allowed). FP8 tensor cores keep about 14 bits in the accumulator
               // (DeepSeek-V3 report, 3.3.2) between cuBLASLt's promotions to FP32.
               [](DType t) { return is_fp8(t)          ? 0x1p-13
                                    : t == DType::BF16 ? 0x1p-23
                                                       : 0x1p-24; }});
#endif
  return v;
}

TEST(BackendOps, GemmAgreesWithTheReferenceOnEveryBackend) {
  int ran = 0;
  for (const BackendUnderTest& be : backends()) {
    if (!be.present()) {
      std::printf("backend %s: not present here, skipped\n", be.name.c_str());
      continue;
    }
    for (const GemmCase& c : kGemmCases) {
      if (!be.supports(c)) continue;
      SCOPED_TRACE(be.name + " " + c.name());
      const GemmInputs in{make_operand(c.a, c.M * c.K, 1, 16.0f),
                          make_operand(c.b, c.K * c.N, 2, 8.0f), test::random_normal(c.M * c.N, 3)};
      Vec want = in.c0;
      cpu::ref::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, in.a.values.data(), in.b.values.data(),
                     c.beta, want.data());
      const Vec got = be.gemm(c, in);
      const Vec mag = test::gemm_magnitudes(c.ta, c.tb, c.M, c.N, c.K, c.alpha, in.a.values,
                                            in.b.values, c.beta, in.c0, nullptr);
      const double unit = (static_cast<double>(c.K) + 4) * be.accumulation_unit(c.a);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], unit * mag[i] + 1e-30) << "at " << i;
      ++ran;
    }
  }
  EXPECT_GE(ran, static_cast<int>(std::size(kGemmCases)));  // the CPU runs every case
}

// LayerNorm and RMSNorm into each output dtype, with and without the residual add fused in.
struct NormCase {
  Normalization kind;
  int64_t rows, C;
  DType out;
  bool residual;
  std::string name() const {
    return std::string(normalization_name(kind)) + " " + std::to_string(rows) + "x" +
           std::to_string(C) + " -> " + std::string(dtype_name(out)) + (residual ? " (x + r)" : "");
  }
};

const NormCase kNormCases[] = {
    {Normalization::LayerNorm, 7, 33, DType::F32, false},
    {Normalization::LayerNorm, 16, 256, DType::E4M3, true},
    {Normalization::LayerNorm, 5, 96, DType::BF16, false},
    {Normalization::RMSNorm, 7, 33, DType::F32, true},
    {Normalization::RMSNorm, 16, 256, DType::E5M2, false},
    {Normalization::RMSNorm, 5, 96, DType::BF16, true},
};

struct NormInputs {
  Vec x, r, gamma, beta;
};

// What a backend's norm gave: y as values (FP8 codes decoded and unscaled, BF16 widened), the
// residual sum s, and the FP8 statistics.
struct NormResult {
  Vec y, s;
  float amax = 0;
  unsigned long long saturated = 0, flushed = 0;
};

constexpr float kNormEps = 1e-5f;
// Normalized rows times N(0, 1) gains stay far below 448 / 4: no FP8 output saturates.
constexpr float kFp8Scale = 4.0f;

// Reads a ProducerOut's result back as values.
Vec decode_out(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  Vec y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::F32) {
      std::memcpy(&y[i], bytes.data() + i * 4, 4);
    } else if (t == DType::BF16) {
      bf16_t h;
      std::memcpy(&h, bytes.data() + i * 2, 2);
      y[i] = bf16_to_float(h);
    } else {
      y[i] = fp8_decode(bytes[i], fp8_format_of(t)) / kFp8Scale;
    }
  }
  return y;
}

// A ProducerOut over host or device buffers of the case's dtype.
ProducerOut producer_out(DType t, void* y, const float* scale, float* amax,
                         unsigned long long* counts) {
  ProducerOut o;
  if (t == DType::F32) o.y = static_cast<float*>(y);
  if (t == DType::BF16) o.y16 = static_cast<bf16_t*>(y);
  if (is_fp8(t))
    o.y8 = {static_cast<uint8_t*>(y), scale, amax, fp8_format_of(t), counts, counts + 1};
  return o;
}

using NormFn = std::function<NormResult(const NormCase&, const NormInputs&)>;

NormResult cpu_norm(const NormCase& c, const NormInputs& in) {
  const int64_t n = c.rows * c.C;
  std::vector<uint8_t> y(static_cast<size_t>(n) * dtype_size(c.out));
  Vec s(static_cast<size_t>(n)), mean(static_cast<size_t>(c.rows)), rstd(mean.size());
  const float scale = kFp8Scale;
  float amax = 0;
  unsigned long long counts[2] = {0, 0};
  const ProducerOut out = producer_out(c.out, y.data(), &scale, &amax, counts);
  const float* r = c.residual ? in.r.data() : nullptr;
  float* sp = c.residual ? s.data() : nullptr;
  if (c.kind == Normalization::LayerNorm) {
    cpu::layernorm_forward(out, sp, mean.data(), rstd.data(), in.x.data(), r, in.gamma.data(),
                           in.beta.data(), c.rows, c.C, kNormEps);
  } else {
    cpu::rmsnorm_forward(out, sp, rstd.data(), in.x.data(), r, in.gamma.data(), c.rows, c.C,
                         kNormEps);
  }
  return {decode_out(c.out, y, n), s, amax, counts[0], counts[1]};
}

#ifdef FP8LM_WITH_CUDA
NormResult cuda_norm(const NormCase& c, const NormInputs& in) {
  const int64_t n = c.rows * c.C;
  DeviceBuffer<uint8_t> y(static_cast<size_t>(n) * dtype_size(c.out));
  DeviceBuffer<float> s(static_cast<size_t>(n)), mean(static_cast<size_t>(c.rows)),
      rstd(static_cast<size_t>(c.rows));
  const auto scale = to_device(Vec{kFp8Scale});
  auto amax = to_device(Vec{0.0f});
  auto counts = to_device(std::vector<unsigned long long>{0, 0});
  const auto x = to_device(in.x), r = to_device(in.r), g = to_device(in.gamma),
             b = to_device(in.beta);
  const ProducerOut out = producer_out(c.out, y.data(), scale.data(), amax.data(), counts.data());
  float* sp = c.residual ? s.data() : nullptr;
  const float* rp = c.residual ? r.data() : nullptr;
  if (c.kind == Normalization::LayerNorm) {
    cuda::layernorm_forward(out, sp, mean.data(), rstd.data(), x.data(), rp, g.data(), b.data(),
                            c.rows, c.C, kNormEps, nullptr);
  } else {
    cuda::rmsnorm_forward(out, sp, rstd.data(), x.data(), rp, g.data(), c.rows, c.C, kNormEps,
                          nullptr);
  }
  const auto bytes = to_host(y.data(), y.size());
  const auto c_host = to_host(counts.data(), 2);
  return {decode_out(c.out, bytes, n), c.residual ? to_host(s.data(), s.size()) : Vec(n),
          to_host(amax.data(), 1)[0], c_host[0], c_host[1]};
}
#endif

TEST(BackendOps, NormsAgreeWithTheReferenceOnEveryBackend) {
  std::vector<std::pair<std::string, NormFn>> present = {{"cpu", cpu_norm}};
#ifdef FP8LM_WITH_CUDA
  if (test::cuda_device_present()) present.push_back({"cuda", cuda_norm});
#endif
  for (const auto& [name, norm] : present) {
    for (const NormCase& c : kNormCases) {
      SCOPED_TRACE(name + " " + c.name());
      const int64_t n = c.rows * c.C;
      const NormInputs in{test::random_normal(n, 4, 2.0f), test::random_normal(n, 5),
                          test::random_normal(c.C, 6), test::random_normal(c.C, 7)};
      // The reference normalizes s = x + r (a float add, as every backend does) in double.
      Vec s = in.x;
      if (c.residual)
        for (int64_t i = 0; i < n; ++i) s[i] = in.x[i] + in.r[i];
      Vec want(static_cast<size_t>(n)), mean(static_cast<size_t>(c.rows)), rstd(mean.size());
      if (c.kind == Normalization::LayerNorm) {
        cpu::ref::layernorm_forward(want.data(), mean.data(), rstd.data(), s.data(),
                                    in.gamma.data(), in.beta.data(), c.rows, c.C, kNormEps);
      } else {
        cpu::ref::rmsnorm_forward(want.data(), rstd.data(), s.data(), in.gamma.data(), c.rows, c.C,
                                  kNormEps);
      }
      const NormResult got = norm(c, in);
      if (c.residual) {
        EXPECT_TRUE(test::same_bits(got.s, s));
      }
      // FP32: the row statistics' rounding (test_kernel_layernorm.cpp's kRowTol, 32 units of
      // 2^-24 relative to 1 + |y|). A rounded output adds half its ulp at |y|, 2^-(mantissa
      // bits + 1) of |y| in the normal range (2^-8 for BF16, 2^-4 for E4M3, 2^-3 for E5M2), and
      // at most a subnormal step below it.
      const double half_ulp = c.out == DType::F32    ? 0.0
                              : c.out == DType::BF16 ? 0x1p-8
                              : c.out == DType::E4M3 ? 0x1p-4
                                                     : 0x1p-3;
      const double floor = is_fp8(c.out) ? fp8_min_subnormal(fp8_format_of(c.out)) / kFp8Scale : 0;
      double ref_amax = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double w = want[i],
                     tol = 32 * 0x1p-24 * (1 + std::fabs(w)) + half_ulp * std::fabs(w) + floor;
        ASSERT_NEAR(got.y[i], w, tol) << "at " << i;
        ref_amax = std::max(ref_amax, std::fabs(w));
      }
      if (is_fp8(c.out)) {
        EXPECT_NEAR(got.amax, ref_amax, 32 * 0x1p-24 * (1 + ref_amax));
        EXPECT_EQ(got.saturated, 0u);  // |y| * 4 stays below E4M3's 448 for these inputs
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
