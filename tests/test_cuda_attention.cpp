// CUDA causal attention against the CPU kernel (kernels/cpu/attention.h) on the same inputs:
// the plain path (batched GEMMs, the oracle) and the flash path (WMMA tiles, what the model
// runs; head sizes it has no kernel for fall back to plain), forward and backward, each other,
// and the properties a caller relies on: causality, one token, determinism.
//
// Inputs (qkv and dout) are rounded to BF16 on the host first, so both sides multiply the same
// values; what remains is the device's BF16 rounding of P (forward and dV) and of dS (dQ, dK),
// and FP32 summation order. The tolerances below bound exactly those.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using test::Vec;

struct Shape {
  int64_t B, T, C, H;
  int64_t hd() const { return C / H; }
  size_t qkv_size() const { return static_cast<size_t>(B * T * 3 * C); }
  size_t out_size() const { return static_cast<size_t>(B * T * C); }
  size_t lse_size() const { return static_cast<size_t>(B * H * T); }
  std::string name() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
           " H=" + std::to_string(H);
  }
};

// hd 64: one token, one partial 64-row tile, exactly two tiles; hd 128: five tiles with a
// ragged tail and nine; hd 48: a multiple of 16 other than 64 and 128; hd 20: no flash kernel,
// so flash falls back to plain. The rest give every other flash head size (16, 32, 80, 96,
// 112) one run, with T just past a tile boundary or ragged, and the large ones (160, 256:
// issue 34) two tiles with a ragged tail.
const Shape kShapes[] = {
    {1, 1, 64, 1},    {2, 37, 128, 2}, {2, 128, 256, 4}, {1, 300, 512, 4}, {2, 520, 256, 2},
    {1, 64, 96, 2},   {1, 16, 40, 2},  {1, 65, 64, 4},   {1, 70, 128, 4},  {1, 70, 160, 2},
    {1, 130, 192, 2}, {1, 33, 224, 2}, {1, 70, 320, 2},  {1, 100, 512, 2},
};

// Multi-head shapes here (Hkv = H), element-wise bounds and all; grouped-query attention on the
// device is held to the reference by test_backend_ops.
using ForwardFn = void (*)(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                           int64_t, cudaStream_t);
using BackwardFn = void (*)(float*, const float*, const float*, const float*, const float*, int64_t,
                            int64_t, int64_t, int64_t, int64_t, cudaStream_t);

struct Path {
  const char* name;
  ForwardFn forward;
  BackwardFn backward;
};
const Path kPlain{"plain", cuda::plain::attention_forward, cuda::plain::attention_backward};
const Path kFlash{"flash", cuda::attention_forward, cuda::attention_backward};

Vec bf16_rounded(Vec x) {
  for (float& v : x) v = bf16_to_float(bf16_from_float(v));
  return x;
}

struct Forward {
  Vec out, lse;
};

// Outputs start as NaN (all-ones bytes), so an element the kernel never writes fails.
template <typename T>
cuda::DeviceBuffer<T> nan_filled(size_t n) {
  cuda::DeviceBuffer<T> d(n);
  FP8LM_CUDA_CHECK(cudaMemset(d.data(), 0xff, d.bytes()));
  return d;
}

Forward run_forward(const Path& path, const Shape& s, const Vec& qkv) {
  const auto d_qkv = cuda::to_device(qkv);
  auto d_out = nan_filled<float>(s.out_size());
  auto d_lse = nan_filled<float>(s.lse_size());
  path.forward(d_out.data(), d_lse.data(), d_qkv.data(), s.B, s.T, s.C, s.H, s.H, nullptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  return {cuda::to_host(d_out.data(), s.out_size()), cuda::to_host(d_lse.data(), s.lse_size())};
}

Vec run_backward(const Path& path, const Shape& s, const Vec& dout, const Vec& qkv,
                 const Forward& fwd) {
  const auto d_dout = cuda::to_device(dout);
  const auto d_qkv = cuda::to_device(qkv);
  const auto d_out = cuda::to_device(fwd.out);
  const auto d_lse = cuda::to_device(fwd.lse);
  auto d_dqkv = nan_filled<float>(s.qkv_size());
  path.backward(d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out.data(), d_lse.data(), s.B, s.T,
                s.C, s.H, s.H, nullptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  return cuda::to_host(d_dqkv.data(), s.qkv_size());
}

// For every output element, the sum of magnitudes that BF16 rounding on the device perturbs,
// computed in double from the exact softmax: out[i,d] = sum_j p_ij |v_jd|,
// dV[j,d] = sum_i p_ij |dout_id|, dQ[i,d] = scale sum_j |ds_ij| |k_jd|,
// dK[j,d] = scale sum_i |ds_ij| |q_id|, with ds_ij = p_ij (dout_i.v_j - dout_i.out_i).
// Rounding each p (or ds) to BF16 changes it by at most 2^-8 of itself, so it moves each
// element by at most 2^-8 times its bound.
struct Bounds {
  Vec out, dqkv;
};

Bounds rounding_bounds(const Shape& s, const Vec& qkv, const Vec& dout) {
  const int64_t T = s.T, C = s.C, hd = s.hd(), row = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Bounds bounds{Vec(s.out_size(), 0.0f), Vec(s.qkv_size(), 0.0f)};
  std::vector<double> p(T), ds(T), out_b(T * hd), dq_b(T * hd), dk_b(T * hd), dv_b(T * hd);
  auto dot = [hd](const float* a, const float* b) {
    double sum = 0.0;
    for (int64_t d = 0; d < hd; ++d) sum += static_cast<double>(a[d]) * b[d];
    return sum;
  };
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const float* q = qkv.data() + b * T * row + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const float* dout_h = dout.data() + b * T * C + h * hd;
      std::fill(out_b.begin(), out_b.end(), 0.0);
      std::fill(dq_b.begin(), dq_b.end(), 0.0);
      std::fill(dk_b.begin(), dk_b.end(), 0.0);
      std::fill(dv_b.begin(), dv_b.end(), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = scale * dot(q + i * row, k + j * row);
          max_score = std::max(max_score, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - max_score));
        double delta = 0.0;  // dout_i . out_i = sum_j p_ij dp_ij
        for (int64_t j = 0; j <= i; ++j) {
          p[j] /= sum;
          ds[j] = dot(dout_h + i * C, v + j * row);
          delta += p[j] * ds[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          ds[j] = std::fabs(p[j] * (ds[j] - delta));
          for (int64_t d = 0; d < hd; ++d) {
            out_b[i * hd + d] += p[j] * std::fabs(v[j * row + d]);
            dv_b[j * hd + d] += p[j] * std::fabs(dout_h[i * C + d]);
            dq_b[i * hd + d] += scale * ds[j] * std::fabs(k[j * row + d]);
            dk_b[j * hd + d] += scale * ds[j] * std::fabs(q[i * row + d]);
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t e = t * hd + d;
          bounds.out[(b * T + t) * C + h * hd + d] = static_cast<float>(out_b[e]);
          float* dqkv = bounds.dqkv.data() + (b * T + t) * row + h * hd + d;
          dqkv[0] = static_cast<float>(dq_b[e]);
          dqkv[C] = static_cast<float>(dk_b[e]);
          dqkv[2 * C] = static_cast<float>(dv_b[e]);
        }
      }
    }
  }
  return bounds;
}

double max_abs(const Vec& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// Per element: 2^-8 * bound (the BF16 rounding of P or dS, see Bounds) plus FP32 summation order
// on either side, which errs by about (hd + T) * 2^-24 of the result's magnitude (hd products
// per score, up to T terms per output); the CPU kernel's own tests measure 10-100x below that.
Vec tolerance(const Shape& s, const Vec& bound, const Vec& want) {
  const double fp32 = 2.0 * static_cast<double>(s.hd() + s.T) * 0x1p-24 * max_abs(want);
  Vec tol(bound.size());
  for (size_t e = 0; e < bound.size(); ++e) {
    tol[e] = static_cast<float>(0x1p-8 * static_cast<double>(bound[e]) + fp32);
  }
  return tol;
}

// lse = max + log(sum) of the FP32 scores, which differ from the CPU's only in summation order:
// a score sums hd exact products of magnitude up to about sqrt(hd) in total after scaling, so it
// errs by some hd * sqrt(hd) * 2^-24; the log of a sum of T terms by T * 2^-24. Four times that.
double lse_tolerance(const Shape& s) {
  const double hd = static_cast<double>(s.hd());
  return 4.0 * (hd * std::sqrt(hd) + static_cast<double>(s.T)) * 0x1p-24;
}

// Fails once, naming the worst element relative to its tolerance (any NaN is the worst).
void expect_within(const Vec& got, const Vec& want, const Vec& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(tol.size(), want.size()) << what;
  double worst_ratio = 0.0;
  size_t worst = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double err = std::fabs(static_cast<double>(got[e]) - static_cast<double>(want[e]));
    if (std::isnan(err)) {
      worst = e;
      worst_ratio = INFINITY;
      break;
    }
    const double ratio = err / std::max(static_cast<double>(tol[e]), 1e-30);
    if (ratio > worst_ratio) worst_ratio = ratio, worst = e;
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << worst << " is " << got[worst] << ", want "
                              << want[worst] << " within " << tol[worst];
}

Vec scaled(Vec x, float factor) {
  for (float& v : x) v *= factor;
  return x;
}

// One shape's inputs, the CPU's results on them and the rounding bounds.
struct Case {
  Shape s;
  Vec qkv, dout;
  Forward cpu;
  Vec cpu_dqkv;
  Bounds bounds;
  Vec out_tol, lse_tol, dqkv_tol;
};

Case make_case(const Shape& s) {
  Case c{s, {}, {}, {}, {}, {}, {}, {}, {}};
  const auto seed = static_cast<uint32_t>(s.T * 1000 + s.C * 10 + s.H);
  c.qkv = bf16_rounded(test::random_normal(static_cast<int64_t>(s.qkv_size()), seed));
  c.dout = bf16_rounded(test::random_normal(static_cast<int64_t>(s.out_size()), seed + 1));
  c.cpu = {Vec(s.out_size()), Vec(s.lse_size())};
  cpu::attention_forward(c.cpu.out.data(), c.cpu.lse.data(), c.qkv.data(), s.B, s.T, s.C, s.H, s.H);
  c.cpu_dqkv.resize(s.qkv_size());
  cpu::attention_backward(c.cpu_dqkv.data(), c.dout.data(), c.qkv.data(), c.cpu.out.data(),
                          c.cpu.lse.data(), s.B, s.T, s.C, s.H, s.H);
  c.bounds = rounding_bounds(s, c.qkv, c.dout);
  c.out_tol = tolerance(s, c.bounds.out, c.cpu.out);
  c.lse_tol = Vec(s.lse_size(), static_cast<float>(lse_tolerance(s)));
  c.dqkv_tol = tolerance(s, c.bounds.dqkv, c.cpu_dqkv);
  return c;
}

void expect_forward_matches_cpu(const Path& path) {
  for (const Shape& s : kShapes) {
    const Case c = make_case(s);
    const Forward got = run_forward(path, s, c.qkv);
    expect_within(got.out, c.cpu.out, c.out_tol, std::string(path.name) + " out " + s.name());
    expect_within(got.lse, c.cpu.lse, c.lse_tol, std::string(path.name) + " lse " + s.name());
  }
}

// All paths are given the CPU's out and lse, so only the backward itself differs.
void expect_backward_matches_cpu(const Path& path) {
  for (const Shape& s : kShapes) {
    const Case c = make_case(s);
    const Vec got = run_backward(path, s, c.dout, c.qkv, c.cpu);
    expect_within(got, c.cpu_dqkv, c.dqkv_tol, std::string(path.name) + " dqkv " + s.name());
  }
}

// Issue 34: head sizes up to 256 run the flash kernels (on a device with sm_80's or sm_90's
// shared memory, as the emulator's is), so the shapes above test them rather than the plain
// path; sizes that are not a multiple of 16, or above 256, do not.
TEST(CudaAttention, FlashCoversHeadSizesUpTo256) {
  FP8LM_REQUIRE_CUDA();
  int optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
            cudaSuccess);
  for (int64_t hd = 16; hd <= 128; hd += 16) EXPECT_TRUE(cuda::flash_attention_head_size(hd)) << hd;
  for (const int64_t hd : {160, 192, 224, 256})
    EXPECT_EQ(cuda::flash_attention_head_size(hd), optin >= 163 * 1024) << hd;
  for (const int64_t hd : {20, 136, 272, 512})
    EXPECT_FALSE(cuda::flash_attention_head_size(hd)) << hd;
}

TEST(CudaAttention, PlainForwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  expect_forward_matches_cpu(kPlain);
}

TEST(CudaAttention, FlashForwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  expect_forward_matches_cpu(kFlash);
}

TEST(CudaAttention, PlainBackwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  expect_backward_matches_cpu(kPlain);
}

TEST(CudaAttention, FlashBackwardMatchesCpu) {
  FP8LM_REQUIRE_CUDA();
  expect_backward_matches_cpu(kFlash);
}

// Each path is within its tolerance of the CPU, so the two are within twice that of each other.
TEST(CudaAttention, FlashMatchesPlain) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape& s : kShapes) {
    const Case c = make_case(s);
    const Forward plain = run_forward(kPlain, s, c.qkv);
    const Forward flash = run_forward(kFlash, s, c.qkv);
    expect_within(flash.out, plain.out, scaled(c.out_tol, 2.0f), "out " + s.name());
    expect_within(flash.lse, plain.lse, scaled(c.lse_tol, 2.0f), "lse " + s.name());
    const Vec plain_dqkv = run_backward(kPlain, s, c.dout, c.qkv, c.cpu);
    const Vec flash_dqkv = run_backward(kFlash, s, c.dout, c.qkv, c.cpu);
    expect_within(flash_dqkv, plain_dqkv, scaled(c.dqkv_tol, 2.0f), "dqkv " + s.name());
  }
}

// With one token the softmax is exactly 1: out is v itself and dV is dout, bit for bit (both
// already BF16 values, multiplied by an exact 1). dQ and dK are 0 in exact arithmetic (D equals
// the one dP); what remains is the FP32 summation order of dout.v against dout.out, some
// hd * 2^-24 of sum |dout||v| (< 1e-4 here), times scale * |k| < 1.
TEST(CudaAttention, SingleTokenAttendsOnlyToItself) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape& s : {Shape{3, 1, 128, 2}, Shape{3, 1, 40, 2}}) {  // flash; plain fallback
    const Case c = make_case(s);
    for (const Path* path : {&kPlain, &kFlash}) {
      const std::string what = std::string(path->name) + " " + s.name();
      const Forward fwd = run_forward(*path, s, c.qkv);
      const Vec dqkv = run_backward(*path, s, c.dout, c.qkv, fwd);
      for (int64_t b = 0; b < s.B; ++b) {
        for (int64_t x = 0; x < s.C; ++x) {
          const size_t token = static_cast<size_t>(b * 3 * s.C + x);
          const size_t e = static_cast<size_t>(b * s.C + x);
          ASSERT_EQ(fwd.out[e], c.qkv[token + 2 * s.C]) << what << " out " << e;
          ASSERT_EQ(dqkv[token + 2 * s.C], c.dout[e]) << what << " dv " << e;
          ASSERT_NEAR(dqkv[token], 0.0f, 1e-4f) << what << " dq " << e;
          ASSERT_NEAR(dqkv[token + s.C], 0.0f, 1e-4f) << what << " dk " << e;
        }
      }
      expect_within(fwd.lse, c.cpu.lse, c.lse_tol, what + " lse");
    }
  }
}

// Changing the keys and values of tokens t0.. leaves everything computed for earlier queries
// bit for bit the same: their weights on later keys are exactly 0, and 0 * v adds nothing.
// That covers out and lse, and, in backward, dQ of the earlier tokens (which depends only on
// keys up to its own). t0 = 70 sits inside the second 64-row tile.
TEST(CudaAttention, LaterTokensDoNotChangeEarlierOutputs) {
  FP8LM_REQUIRE_CUDA();
  const int64_t t0 = 70;
  for (const Shape& s : {Shape{2, 150, 128, 2}, Shape{2, 150, 40, 2}}) {  // flash; fallback
    const Case c = make_case(s);
    Vec changed = c.qkv;
    const Vec noise = bf16_rounded(test::random_normal(static_cast<int64_t>(s.qkv_size()), 99));
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t t = t0; t < s.T; ++t) {
        for (int64_t x = s.C; x < 3 * s.C; ++x) {  // k and v
          const size_t e = static_cast<size_t>((b * s.T + t) * 3 * s.C + x);
          changed[e] = noise[e];
        }
      }
    }
    for (const Path* path : {&kPlain, &kFlash}) {
      const std::string what = std::string(path->name) + " " + s.name();
      const Forward a = run_forward(*path, s, c.qkv);
      const Forward b = run_forward(*path, s, changed);
      const Vec da = run_backward(*path, s, c.dout, c.qkv, a);
      const Vec db = run_backward(*path, s, c.dout, changed, b);
      for (int64_t batch = 0; batch < s.B; ++batch) {
        for (int64_t t = 0; t < t0; ++t) {
          for (int64_t x = 0; x < s.C; ++x) {
            const size_t e = static_cast<size_t>((batch * s.T + t) * s.C + x);
            ASSERT_EQ(a.out[e], b.out[e]) << what << " out t=" << t;
            const size_t dq = static_cast<size_t>((batch * s.T + t) * 3 * s.C + x);
            ASSERT_EQ(da[dq], db[dq]) << what << " dq t=" << t;
          }
          for (int64_t h = 0; h < s.H; ++h) {
            const size_t e = static_cast<size_t>((batch * s.H + h) * s.T + t);
            ASSERT_EQ(a.lse[e], b.lse[e]) << what << " lse t=" << t;
          }
        }
      }
    }
  }
}

// No atomics: every output element is summed by one thread in a fixed order.
TEST(CudaAttention, FlashIsDeterministic) {
  FP8LM_REQUIRE_CUDA();
  const Shape s{2, 300, 256, 2};
  const Case c = make_case(s);
  const Forward a = run_forward(kFlash, s, c.qkv);
  const Forward b = run_forward(kFlash, s, c.qkv);
  EXPECT_TRUE(test::same_bits(a.out, b.out));
  EXPECT_TRUE(test::same_bits(a.lse, b.lse));
  EXPECT_TRUE(test::same_bits(run_backward(kFlash, s, c.dout, c.qkv, a),
                              run_backward(kFlash, s, c.dout, c.qkv, a)));
}

}  // namespace
}  // namespace fp8lm
