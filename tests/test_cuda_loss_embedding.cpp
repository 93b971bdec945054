// The device embedding, softmax-cross-entropy and argmax against their CPU twins
// (kernels/cpu/embedding.h, cross_entropy.h, GPT::generate's std::max_element).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda/loss_embedding.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using test::random_normal;
using test::same_bits;
using Vec = std::vector<float>;
using Ints = std::vector<int32_t>;

Ints random_ints(int64_t n, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(lo, hi);
  Ints v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct EmbeddingShape {
  int64_t B, T, C;
  int32_t V;
};
// One position; C not a multiple of 4; more positions than a block has threads; few tokens
// over many positions (long runs of one token for the backward pass).
const EmbeddingShape kEmbeddingShapes[] = {
    {1, 1, 1, 3}, {3, 5, 7, 11}, {2, 17, 1023, 50}, {4, 10, 4096, 6}, {8, 128, 768, 50}};

TEST(CudaEmbedding, ForwardMatchesCpuExactly) {
  FP8LM_REQUIRE_CUDA();
  for (const auto& [B, T, C, V] : kEmbeddingShapes) {
    SCOPED_TRACE(C);
    const Ints tokens = random_ints(B * T, 0, V - 1, 1);
    // wpe has more rows than T, as the model's position table does.
    const Vec wte = random_normal(V * C, 2), wpe = random_normal((T + 3) * C, 3);
    Vec want(static_cast<size_t>(B * T * C));
    cpu::embedding_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    auto d_tokens = to_device(tokens);
    auto d_wte = to_device(wte), d_wpe = to_device(wpe);
    cuda::DeviceBuffer<float> d_out(want.size());
    cuda::embedding_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C,
                            nullptr);
    // One float addition per element on both sides.
    EXPECT_TRUE(same_bits(to_host(d_out.data(), want.size()), want));
  }
}

TEST(CudaEmbedding, BackwardMatchesCpuBitsWithRepeatedTokens) {
  FP8LM_REQUIRE_CUDA();
  for (const auto& [B, T, C, V] : kEmbeddingShapes) {
    SCOPED_TRACE(C);
    Ints tokens = random_ints(B * T, 0, V - 2, 4);  // token V - 1 never occurs
    for (int64_t t = 0; t < T; ++t) tokens[t] = 0;  // one sequence of a single token
    const Vec dout = random_normal(B * T * C, 5);
    // Non-zero starting gradients (both add to them); wpe's extra rows must stay untouched.
    Vec dwte = random_normal(V * C, 6), dwpe = random_normal((T + 3) * C, 7);
    auto d_dwte = to_device(dwte), d_dwpe = to_device(dwpe);
    auto d_tokens = to_device(tokens);
    auto d_dout = to_device(dout);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    cuda::DeviceBuffer<uint8_t> scratch(cuda::embedding_backward_scratch_bytes(B * T));
    cuda::embedding_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), B, T, C,
                             scratch.data(), nullptr);
    // The CPU adds each element's terms one by one in position order onto the prior value;
    // the device adds the same terms in the same order (a stable sort by token keeps it), so
    // the sums round the same way.
    EXPECT_TRUE(same_bits(to_host(d_dwte.data(), dwte.size()), dwte));
    EXPECT_TRUE(same_bits(to_host(d_dwpe.data(), dwpe.size()), dwpe));
  }
}

// --- softmax cross-entropy ---

struct CeShape {
  int64_t rows, V;
};
const CeShape kCeShapes[] = {{1, 1}, {3, 7}, {17, 1000}, {5, 50257}, {600, 64}};

// Targets in [0, V) with every fifth row ignored (-1).
Ints targets_for(int64_t rows, int64_t V, uint32_t seed) {
  Ints t = random_ints(rows, 0, static_cast<int32_t>(V) - 1, seed);
  for (int64_t r = 3; r < rows; r += 5) t[r] = -1;
  return t;
}

// Logits spread over several units, one row shifted far up (the max subtraction must hold).
Vec logits_for(int64_t rows, int64_t V, uint32_t seed) {
  Vec x = random_normal(rows * V, seed, 0.0f, 3.0f);
  for (int64_t i = 0; i < V; ++i) x[i] += 1000.0f;
  return x;
}

// Error bound of one row's sum of exponentials, relative to the sum, in units of 2^-24.
// Each term: glibc's expf is within 1 ulp, the device's within 2 (CUDA math guide), 1 ulp
// being at most 2 units. The CPU adds ceil(V/16) terms per lane and then 16 lanes; the device
// ceil(V/512) per thread and then a 9-level tree: at most that many roundings of 1 unit each.
double sum_error_units(int64_t V) {
  return 2.0 + 4.0 + static_cast<double>(V) / 16 + 17 + static_cast<double>(V) / 512 + 10;
}

TEST(CudaCrossEntropy, MatchesCpuLossesGradientsAndSum) {
  FP8LM_REQUIRE_CUDA();
  const float grad_scale = 0.37f;
  for (const auto& [rows, V] : kCeShapes) {
    SCOPED_TRACE(V);
    const Ints targets = targets_for(rows, V, 11);
    const Vec logits = logits_for(rows, V, 12);
    Vec want_d(logits.size()), want_loss(static_cast<size_t>(rows));
    cpu::softmax_cross_entropy(want_d.data(), want_loss.data(), logits.data(), targets.data(), rows,
                               V, grad_scale);

    auto d_targets = to_device(targets);
    auto d_logits = to_device(logits);
    cuda::DeviceBuffer<float> d_dlogits(logits.size()), d_losses(rows), d_sum(1);
    cuda::softmax_cross_entropy(d_dlogits.data(), d_losses.data(), d_sum.data(), d_logits.data(),
                                d_targets.data(), rows, V, grad_scale, nullptr);
    const Vec got_d = to_host(d_dlogits.data(), logits.size());
    const Vec got_loss = to_host(d_losses.data(), rows);
    const float got_sum = to_host(d_sum.data(), 1)[0];

    // loss = log(sum) - (x_t - m): the sum's relative error becomes an absolute one in log;
    // logf adds at most 1 ulp of log(sum) <= log(V) on either side; the final subtraction
    // rounds once on each side.
    const double sum_err = sum_error_units(V) * 0x1p-24;
    double loss_tol_total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      if (targets[r] < 0) {
        EXPECT_EQ(got_loss[r], 0.0f) << r;
        for (int64_t i = 0; i < V; ++i) ASSERT_EQ(got_d[r * V + i], 0.0f) << r;
        continue;
      }
      const double tol = sum_err + 0x1p-22 * std::log(static_cast<double>(V) + 1.0) +
                         0x1p-23 * std::fabs(want_loss[r]);
      loss_tol_total += tol;
      ASSERT_NEAR(got_loss[r], want_loss[r], tol) << "loss of row " << r;
      // d = p * grad_scale (- grad_scale at the target): p carries the sum's error, its own
      // exponential's (3 ulp together), and the division and product (1 ulp each); the
      // target's subtraction rounds once more (an ulp of the result).
      for (int64_t i = 0; i < V; ++i) {
        const double want = want_d[r * V + i];
        const double p_gs = want + (i == targets[r] ? grad_scale : 0.0f);
        const double dtol = (sum_err + 10 * 0x1p-24) * std::fabs(p_gs) + 0x1p-23 * std::fabs(want);
        ASSERT_NEAR(got_d[r * V + i], want, dtol) << "dlogits row " << r << " col " << i;
      }
    }
    // The sum of the CPU's losses (in double, row order, as its mean is) within the losses'
    // own tolerances, plus the final rounding to float.
    double want_sum = 0.0, got_losses_sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      want_sum += want_loss[r];
      got_losses_sum += got_loss[r];
    }
    EXPECT_NEAR(got_sum, want_sum, loss_tol_total + 0x1p-23 * std::fabs(want_sum));
    // Against the device's own losses the only difference is the double summation order:
    // far below float's precision, so within the final rounding to float.
    EXPECT_NEAR(got_sum, got_losses_sum, 0x1p-23 * std::fabs(got_losses_sum));

    // dlogits aliasing logits: the same bits as into a separate buffer.
    cuda::softmax_cross_entropy(d_logits.data(), d_losses.data(), d_sum.data(), d_logits.data(),
                                d_targets.data(), rows, V, grad_scale, nullptr);
    EXPECT_TRUE(same_bits(to_host(d_logits.data(), logits.size()), got_d));
    EXPECT_TRUE(same_bits(to_host(d_losses.data(), rows), got_loss));
    EXPECT_EQ(to_host(d_sum.data(), 1)[0], got_sum);

    // Without dlogits (evaluation): the same losses and sum.
    auto d_logits2 = to_device(logits);
    cuda::softmax_cross_entropy(nullptr, d_losses.data(), d_sum.data(), d_logits2.data(),
                                d_targets.data(), rows, V, grad_scale, nullptr);
    EXPECT_TRUE(same_bits(to_host(d_losses.data(), rows), got_loss));
    EXPECT_EQ(to_host(d_sum.data(), 1)[0], got_sum);
  }
}

// --- argmax ---

TEST(CudaArgmax, FirstOfEqualMaximaLikeMaxElement) {
  FP8LM_REQUIRE_CUDA();
  for (int64_t V : {int64_t{1}, int64_t{5}, int64_t{513}, int64_t{50257}}) {
    SCOPED_TRACE(V);
    const int64_t rows = 6;
    Vec x = random_normal(rows * V, 21);
    // Row 1: ties at three positions in different threads (and warps) of a block, the first in
    // a later thread than the second.
    for (int64_t i : {int64_t{400}, int64_t{600}, int64_t{1500}})
      if (i < V) x[V + i] = 100.0f;
    // Row 2: every value equal. Row 3: every value -Inf. Row 4: the max last.
    for (int64_t i = 0; i < V; ++i) {
      x[2 * V + i] = 1.5f;
      x[3 * V + i] = -INFINITY;
    }
    x[4 * V + V - 1] = 1e30f;
    Ints want(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * V;
      want[r] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
    auto d_x = to_device(x);
    cuda::DeviceBuffer<int32_t> d_out(rows);
    cuda::argmax_rows(d_out.data(), d_x.data(), rows, V, nullptr);
    EXPECT_EQ(to_host(d_out.data(), rows), want);
  }
}

}  // namespace
}  // namespace fp8lm
