// Causal attention: the fast flash-style kernels against the double-precision reference twins,
// the reference backward against finite differences of a double forward, and the properties a
// caller relies on (causality, decode == forward's last row, determinism). The entry points
// run the CPU's best kernel set; the AttentionKernelSets tests hold each set to the same
// contracts and the sets to each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_isa.h"
#include "kernels/cpu/attention_unfused.h"

namespace fp8lm {
namespace {

struct Shape {
  int64_t B, T, C, H;
  int64_t Hkv = 0;  // key/value heads; 0: H
  int64_t kv() const { return Hkv ? Hkv : H; }
  int64_t hd() const { return C / H; }
  int64_t row() const { return C + 2 * kv() * hd(); }  // a token's q, k and v
  std::string name() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
           " H=" + std::to_string(H) + " Hkv=" + std::to_string(kv());
  }
};

// T = 1 (a single key), 63/64/65 (one short of, exactly, one past a 64-key tile), 200 (several
// tiles and query blocks with a ragged tail); hd = 1, 8, 32, 64; grouped-query attention with
// groups of 2 and 4 and one key/value head for all (multi-query).
const Shape kShapes[] = {
    {2, 1, 8, 8},      {2, 1, 64, 1},       {2, 63, 16, 2},    {2, 64, 64, 2},
    {2, 65, 128, 2},   {2, 65, 8, 1},       {2, 200, 96, 3},   {2, 200, 4, 4},
    {2, 65, 64, 4, 2}, {2, 130, 128, 8, 2}, {1, 70, 48, 6, 1}, {2, 1, 32, 4, 1},
};

std::vector<float> random_normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// Fails once, naming the worst element, if |got - want| > tol anywhere.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst_err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (std::isnan(err) || err > worst_err) worst_err = err, worst = i;
    if (std::isnan(err)) break;  // the worst there is; EXPECT_LE fails on it
  }
  EXPECT_LE(worst_err, tol) << what << ": element " << worst << " is " << got[worst] << ", want "
                            << want[worst];
}

// The fast kernels sum in float, the reference in double. A float sum of n terms errs by at
// most about n * 2^-24 of the terms' magnitude, bounded here by the largest reference value.
// Each score sums hd products and each output (or gradient) up to T weighted rows, with one
// online-softmax rescale per 64-key tile, so the worst case is (hd + T) * 2^-24 * max|want|;
// rounding errors partly cancel, and measured errors sit 10-100x below it.
double float_sum_tolerance(const Shape& s, const std::vector<float>& want) {
  return static_cast<double>(s.hd() + s.T) * 0x1p-24 * max_abs(want);
}

struct ForwardResult {
  std::vector<float> out, lse;
};

ForwardResult run_forward(bool fast, const std::vector<float>& qkv, const Shape& s) {
  ForwardResult r{std::vector<float>(s.B * s.T * s.C), std::vector<float>(s.B * s.H * s.T)};
  (fast ? cpu::attention_forward : cpu::ref::attention_forward)(
      r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.H, s.kv());
  return r;
}

std::vector<float> run_backward(bool fast, const std::vector<float>& dout,
                                const std::vector<float>& qkv, const ForwardResult& fwd,
                                const Shape& s) {
  // NaN-filled so a gradient the kernel forgets to overwrite shows up.
  std::vector<float> dqkv(s.B * s.T * s.row(), std::numeric_limits<float>::quiet_NaN());
  (fast ? cpu::attention_backward : cpu::ref::attention_backward)(
      dqkv.data(), dout.data(), qkv.data(), fwd.out.data(), fwd.lse.data(), s.B, s.T, s.C, s.H,
      s.kv());
  return dqkv;
}

// Each kernel set this CPU can run; attention.h's entry points use only the best of them.
std::vector<cpu::AttentionIsa> runnable_isas() {
  std::vector<cpu::AttentionIsa> isas{cpu::AttentionIsa::kGeneric};
  if (cpu_features().avx512) isas.push_back(cpu::AttentionIsa::kAvx512);
  return isas;
}

std::string isa_name(cpu::AttentionIsa isa) {
  return isa == cpu::AttentionIsa::kAvx512 ? "avx512" : "generic";
}

// kShapes plus heads longer than the AVX-512 kernels' 128-value register block (hd = 200 runs
// in two chunks) and one not a multiple of 16 that spans three key tiles.
std::vector<Shape> kernel_set_shapes() {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({1, 70, 400, 2});
  shapes.push_back({2, 130, 33, 1});
  return shapes;
}

ForwardResult run_forward(cpu::AttentionIsa isa, const std::vector<float>& qkv, const Shape& s) {
  ForwardResult r{std::vector<float>(s.B * s.T * s.C), std::vector<float>(s.B * s.H * s.T)};
  cpu::attention_forward_with(isa, r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.H,
                              s.kv());
  return r;
}

std::vector<float> run_backward(cpu::AttentionIsa isa, const std::vector<float>& dout,
                                const std::vector<float>& qkv, const ForwardResult& fwd,
                                const Shape& s) {
  std::vector<float> dqkv(s.B * s.T * s.row(), std::numeric_limits<float>::quiet_NaN());
  cpu::attention_backward_with(isa, dqkv.data(), dout.data(), qkv.data(), fwd.out.data(),
                               fwd.lse.data(), s.B, s.T, s.C, s.H, s.kv());
  return dqkv;
}

TEST(AttentionKernelSets, MatchReference) {
  for (const cpu::AttentionIsa isa : runnable_isas()) {
    for (const Shape& s : kernel_set_shapes()) {
      const std::string what = isa_name(isa) + " " + s.name();
      const auto qkv = random_normal(s.B * s.T * s.row(), static_cast<uint32_t>(s.T + s.C));
      const auto dout = random_normal(s.B * s.T * s.C, static_cast<uint32_t>(s.T + s.C + 1));
      const ForwardResult ref = run_forward(false, qkv, s);
      const ForwardResult fast = run_forward(isa, qkv, s);
      expect_close(fast.out, ref.out, float_sum_tolerance(s, ref.out), "out " + what);
      expect_close(fast.lse, ref.lse, float_sum_tolerance(s, ref.lse), "lse " + what);
      const auto ref_dqkv = run_backward(false, dout, qkv, ref, s);
      expect_close(run_backward(isa, dout, qkv, ref, s), ref_dqkv, float_sum_tolerance(s, ref_dqkv),
                   "dqkv " + what);
    }
  }
}

// The two sets differ only in rounding (summation order, FMA contraction, their exp and log),
// so they agree to within the float-sum bound of either against the reference.
TEST(AttentionKernelSets, GenericAndAvx512Agree) {
  if (!cpu_features().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  for (const Shape& s : kernel_set_shapes()) {
    const auto qkv = random_normal(s.B * s.T * s.row(), static_cast<uint32_t>(s.T * 3 + s.C));
    const auto dout = random_normal(s.B * s.T * s.C, static_cast<uint32_t>(s.T * 5 + s.C));
    const ForwardResult generic = run_forward(cpu::AttentionIsa::kGeneric, qkv, s);
    const ForwardResult avx512 = run_forward(cpu::AttentionIsa::kAvx512, qkv, s);
    expect_close(avx512.out, generic.out, float_sum_tolerance(s, generic.out), "out " + s.name());
    expect_close(avx512.lse, generic.lse, float_sum_tolerance(s, generic.lse), "lse " + s.name());
    const auto generic_dqkv = run_backward(cpu::AttentionIsa::kGeneric, dout, qkv, generic, s);
    expect_close(run_backward(cpu::AttentionIsa::kAvx512, dout, qkv, generic, s), generic_dqkv,
                 float_sum_tolerance(s, generic_dqkv), "dqkv " + s.name());
  }
}

// The first len tokens of qkv_all [B, Tmax, C + 2*KV] (KV: the width of k and of v) as a
// forward input, and as a KV cache of Tmax slots (NaN from len on, so a read past len would
// show) with the last token's query.
struct DecodeCase {
  std::vector<float> qkv, q, k_cache, v_cache;
};
DecodeCase decode_case(const std::vector<float>& qkv_all, int64_t B, int64_t Tmax, int64_t len,
                       int64_t C, int64_t KV) {
  const int64_t row = C + 2 * KV;
  DecodeCase d{std::vector<float>(B * len * row),
               std::vector<float>(B * C),
               std::vector<float>(B * Tmax * KV, std::numeric_limits<float>::quiet_NaN()),
               {}};
  d.v_cache = d.k_cache;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < len; ++t) {
      const float* token = &qkv_all[(b * Tmax + t) * row];
      std::copy_n(token, row, &d.qkv[(b * len + t) * row]);
      std::copy_n(token + C, KV, &d.k_cache[(b * Tmax + t) * KV]);
      std::copy_n(token + C + KV, KV, &d.v_cache[(b * Tmax + t) * KV]);
    }
    std::copy_n(&d.qkv[(b * len + len - 1) * row], C, &d.q[b * C]);
  }
  return d;
}

// Decode runs forward's code path on a one-query block, so in every kernel set it reproduces
// forward's last row exactly, also past the first key tile and with a head that is no multiple
// of 16. Cache slots from len on hold NaN, so a read past len would show.
TEST(AttentionKernelSets, DecodeIsForwardsLastRowBitForBit) {
  const int64_t B = 2, Tmax = 140, C = 66, H = 2;
  for (const int64_t Hkv : {H, int64_t{1}}) {  // multi-head, and one key/value head for both
    const auto qkv_all = random_normal(B * Tmax * Shape{B, Tmax, C, H, Hkv}.row(), 51);
    for (const cpu::AttentionIsa isa : runnable_isas()) {
      for (int64_t len : {1, 17, 64, 65, 130}) {
        const Shape s{B, len, C, H, Hkv};
        auto [qkv, q, k_cache, v_cache] = decode_case(qkv_all, B, Tmax, len, C, Hkv * s.hd());
        const ForwardResult fwd = run_forward(isa, qkv, s);
        std::vector<float> decoded(B * C);
        cpu::attention_decode_with(isa, decoded.data(), q.data(), k_cache.data(), v_cache.data(), B,
                                   Tmax, len, C, H, Hkv);
        for (int64_t b = 0; b < B; ++b) {
          EXPECT_EQ(
              0, std::memcmp(&decoded[b * C], &fwd.out[(b * len + len - 1) * C], C * sizeof(float)))
              << isa_name(isa) << " " << s.name() << " b=" << b;
        }
      }
    }
  }
}

TEST(AttentionForward, MatchesReferenceAcrossShapes) {
  for (const Shape& s : kShapes) {
    const auto qkv = random_normal(s.B * s.T * s.row(), static_cast<uint32_t>(s.T * 1000 + s.C));
    const ForwardResult fast = run_forward(true, qkv, s);
    const ForwardResult ref = run_forward(false, qkv, s);
    expect_close(fast.out, ref.out, float_sum_tolerance(s, ref.out), "out " + s.name());
    expect_close(fast.lse, ref.lse, float_sum_tolerance(s, ref.lse), "lse " + s.name());
  }
}

// Queries 20x larger than keys give scores near +-100: exp without the running maximum would
// overflow float (past 88.7), and later tiles raise the maximum, exercising the rescale.
TEST(AttentionForward, MatchesReferenceWithLargeScores) {
  const Shape s{2, 200, 16, 2};
  auto qkv = random_normal(s.B * s.T * s.row(), 5);
  for (int64_t t = 0; t < s.B * s.T; ++t)
    for (int64_t c = 0; c < s.C; ++c) qkv[t * s.row() + c] *= 20.0f;
  const ForwardResult fast = run_forward(true, qkv, s);
  const ForwardResult ref = run_forward(false, qkv, s);
  // Score rounding grows with the scores, 20x here, and exp turns it into relative error of
  // the weights: the usual bound, scaled by 20.
  expect_close(fast.out, ref.out, 20.0 * float_sum_tolerance(s, ref.out), "out");
  expect_close(fast.lse, ref.lse, float_sum_tolerance(s, ref.lse), "lse");
}

// The unfused twin (--no-fusion) sums the same terms in other orders (GEMM blocking, a full
// softmax row): the same float-sum bound applies.
TEST(AttentionUnfused, MatchesReferenceForwardAndBackward) {
  for (const Shape& s : kShapes) {
    const auto qkv = random_normal(s.B * s.T * s.row(), static_cast<uint32_t>(s.T * 1000 + s.C));
    const auto dout = random_normal(s.B * s.T * s.C, static_cast<uint32_t>(s.T * 7 + s.C + 1));
    const ForwardResult ref = run_forward(false, qkv, s);
    std::vector<float> out(ref.out.size()), probs(s.B * s.H * s.T * s.T);
    cpu::attention_forward_unfused(out.data(), probs.data(), qkv.data(), s.B, s.T, s.C, s.H,
                                   s.kv());
    expect_close(out, ref.out, float_sum_tolerance(s, ref.out), "out " + s.name());
    const auto ref_dqkv = run_backward(false, dout, qkv, ref, s);
    std::vector<float> dqkv(ref_dqkv.size(), std::numeric_limits<float>::quiet_NaN());
    cpu::attention_backward_unfused(dqkv.data(), dout.data(), qkv.data(), probs.data(), s.B, s.T,
                                    s.C, s.H, s.kv());
    expect_close(dqkv, ref_dqkv, float_sum_tolerance(s, ref_dqkv), "dqkv " + s.name());
  }
}

TEST(AttentionBackward, MatchesReferenceAcrossShapes) {
  for (const Shape& s : kShapes) {
    const auto qkv = random_normal(s.B * s.T * s.row(), static_cast<uint32_t>(s.T * 1000 + s.C));
    const auto dout = random_normal(s.B * s.T * s.C, static_cast<uint32_t>(s.T * 7 + s.C + 1));
    // Both twins get the reference's out and lse, so only the backward's own rounding differs.
    const ForwardResult fwd = run_forward(false, qkv, s);
    const auto ref = run_backward(false, dout, qkv, fwd, s);
    expect_close(run_backward(true, dout, qkv, fwd, s), ref, float_sum_tolerance(s, ref),
                 "dqkv " + s.name());
  }
}

// The double forward that finite differences need: in float the difference quotient's
// rounding (2^-24 / eps) would swamp the gradient.
std::vector<double> forward_in_double(const std::vector<double>& qkv, const Shape& s) {
  const int64_t hd = s.hd(), row = s.row(), group = s.H / s.kv();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(s.B * s.T * s.C, 0.0);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t i = 0; i < s.T; ++i) {
        const double* q = &qkv[(b * s.T + i) * row + h * hd];
        std::vector<double> weights(i + 1);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = &qkv[(b * s.T + j) * row + s.C + h / group * hd];
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
          weights[j] = scale * dot;
          max_score = std::max(max_score, weights[j]);
        }
        double sum = 0.0;
        for (double& w : weights) sum += (w = std::exp(w - max_score));
        double* o = &out[(b * s.T + i) * s.C + h * hd];
        for (int64_t j = 0; j <= i; ++j) {
          const double* v = &qkv[(b * s.T + j) * row + s.C + (s.kv() + h / group) * hd];
          for (int64_t d = 0; d < hd; ++d) o[d] += weights[j] / sum * v[d];
        }
      }
    }
  }
  return out;
}

// Multi-head, and grouped queries (2 query heads per key/value head; all 3 on one), where a
// shared key/value head's gradient sums its group's.
TEST(AttentionBackward, ReferenceMatchesFiniteDifferences) {
  for (const Shape& s : {Shape{1, 5, 8, 2}, Shape{1, 5, 16, 4, 2}, Shape{1, 4, 12, 3, 1}}) {
    SCOPED_TRACE(s.name());
    const auto qkv = random_normal(s.B * s.T * s.row(), 11);
    const auto w = random_normal(s.B * s.T * s.C, 12);  // L = sum(out * w), so dL/dout = w
    const auto loss = [&](const std::vector<double>& x) {
      const auto out = forward_in_double(x, s);
      double l = 0.0;
      for (size_t i = 0; i < out.size(); ++i) l += out[i] * static_cast<double>(w[i]);
      return l;
    };
    const std::vector<double> qkv_double(qkv.begin(), qkv.end());
    // Central differences err by about eps^2 * L''' (1e-10) plus 2^-53 * |L| / eps (1e-11).
    const double eps = 1e-5;
    std::vector<float> numeric(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) {
      auto plus = qkv_double, minus = qkv_double;
      plus[i] += eps;
      minus[i] -= eps;
      numeric[i] = static_cast<float>((loss(plus) - loss(minus)) / (2.0 * eps));
    }
    const ForwardResult fwd = run_forward(false, qkv, s);
    const auto analytic = run_backward(false, w, qkv, fwd, s);
    // The reference backward reads out and lse as float and writes float, so it carries their
    // 2^-24 relative rounding, amplified a few times by exp(s - lse) and (dp - delta).
    expect_close(analytic, numeric, 16.0 * 0x1p-24 * max_abs(numeric), "dqkv");
  }
}

// Changing token t's key and value leaves every output and lse before t bit for bit unchanged:
// at a tile's last and first key (63, 64), inside a tile, and at the ragged last tile's end.
TEST(AttentionForward, IsCausal) {
  const Shape s{2, 130, 32, 4, 2};
  const auto qkv = random_normal(s.B * s.T * s.row(), 21);
  const ForwardResult base = run_forward(true, qkv, s);
  for (int64_t t : {1, 63, 64, 100, 129}) {
    auto changed = qkv;
    const auto fresh_kv = random_normal(s.row() - s.C, static_cast<uint32_t>(t));
    for (int64_t b = 0; b < s.B; ++b)
      std::copy(fresh_kv.begin(), fresh_kv.end(), changed.begin() + (b * s.T + t) * s.row() + s.C);
    const ForwardResult r = run_forward(true, changed, s);
    for (int64_t b = 0; b < s.B; ++b) {
      const int64_t first = b * s.T * s.C;
      EXPECT_EQ(0, std::memcmp(&r.out[first], &base.out[first], t * s.C * sizeof(float)))
          << "t=" << t << " b=" << b;
      EXPECT_NE(
          0, std::memcmp(&r.out[first + t * s.C], &base.out[first + t * s.C], s.C * sizeof(float)))
          << "token " << t << " should see its own new key and value";
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t first_lse = (b * s.H + h) * s.T;
        EXPECT_EQ(0, std::memcmp(&r.lse[first_lse], &base.lse[first_lse], t * sizeof(float)))
            << "t=" << t << " b=" << b << " h=" << h;
      }
    }
  }
}

// Decoding the last of len tokens against a KV cache built from qkv gives forward's last row.
// Cache slots from len on hold NaN, so a read past len would show.
TEST(AttentionDecode, MatchesLastRowOfForward) {
  const int64_t B = 2, Tmax = 80, C = 64, H = 4;
  const auto qkv_all = random_normal(B * Tmax * 3 * C, 31);
  for (int64_t len : {1, 17, 64}) {
    const Shape s{B, len, C, H};
    auto [qkv, q, k_cache, v_cache] = decode_case(qkv_all, B, Tmax, len, C, C);
    const ForwardResult fast = run_forward(true, qkv, s);
    const ForwardResult ref = run_forward(false, qkv, s);
    std::vector<float> last_fast(B * C), last_ref(B * C);
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(&fast.out[(b * len + len - 1) * C], C, &last_fast[b * C]);
      std::copy_n(&ref.out[(b * len + len - 1) * C], C, &last_ref[b * C]);
    }
    std::vector<float> decoded_fast(B * C), decoded_ref(B * C);
    cpu::attention_decode(decoded_fast.data(), q.data(), k_cache.data(), v_cache.data(), B, Tmax,
                          len, C, H, H);
    cpu::ref::attention_decode(decoded_ref.data(), q.data(), k_cache.data(), v_cache.data(), B,
                               Tmax, len, C, H, H);
    // The contract is equality up to float rounding (a few ulp of the output); each twin shares
    // its forward's summation order, so today they match exactly.
    const std::string what = "len=" + std::to_string(len);
    expect_close(decoded_fast, last_fast, 4.0 * 0x1p-24 * max_abs(last_fast), what);
    expect_close(decoded_ref, last_ref, 4.0 * 0x1p-24 * max_abs(last_ref), what + " ref");
    expect_close(decoded_fast, decoded_ref, float_sum_tolerance(s, decoded_ref),
                 what + " fast vs ref");
  }
}

// Each (batch, head) is one thread's work in a fixed order, so repeated calls agree bit for
// bit; and backward overwrites dqkv whatever it held before.
TEST(Attention, IsDeterministic) {
  const Shape s{2, 200, 96, 3};
  const int64_t C = s.C;
  const auto qkv = random_normal(s.B * s.T * 3 * C, 41);
  const auto dout = random_normal(s.B * s.T * C, 42);
  const ForwardResult first = run_forward(true, qkv, s);
  const ForwardResult second = run_forward(true, qkv, s);
  EXPECT_EQ(0, std::memcmp(first.out.data(), second.out.data(), first.out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float)));

  const auto dqkv_first = run_backward(true, dout, qkv, first, s);  // starts from NaN
  std::vector<float> dqkv_second(dqkv_first.size(), 1.0f);
  cpu::attention_backward(dqkv_second.data(), dout.data(), qkv.data(), first.out.data(),
                          first.lse.data(), s.B, s.T, C, s.H, s.H);
  EXPECT_EQ(0,
            std::memcmp(dqkv_first.data(), dqkv_second.data(), dqkv_first.size() * sizeof(float)));

  std::vector<float> k_cache(s.B * s.T * C), v_cache(s.B * s.T * C), q(s.B * C);
  for (int64_t t = 0; t < s.B * s.T; ++t) {
    std::copy_n(&qkv[t * 3 * C + C], C, &k_cache[t * C]);
    std::copy_n(&qkv[t * 3 * C + 2 * C], C, &v_cache[t * C]);
  }
  for (int64_t b = 0; b < s.B; ++b) std::copy_n(&qkv[(b * s.T + s.T - 1) * 3 * C], C, &q[b * C]);
  std::vector<float> decoded_first(s.B * C), decoded_second(s.B * C);
  for (auto* decoded : {&decoded_first, &decoded_second})
    cpu::attention_decode(decoded->data(), q.data(), k_cache.data(), v_cache.data(), s.B, s.T, s.T,
                          C, s.H, s.H);
  EXPECT_EQ(0, std::memcmp(decoded_first.data(), decoded_second.data(),
                           decoded_first.size() * sizeof(float)));
}

}  // namespace
}  // namespace fp8lm
