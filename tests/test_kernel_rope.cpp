// Rotary position embeddings: the fast kernel against the double-rotation reference, against
// Hugging Face's formula written out here independently (x * cos + rotate_half(x) * sin), and
// the properties attention relies on: position 0 is the identity, lengths are kept, the inverse
// turns back, and a rotated query . key depends only on how far apart the two are.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/rope.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using Vec = std::vector<float>;

struct Layout {
  int64_t rows, T, pos0, stride, heads, hd;
};

// Rows of q and k heads with v columns after them (stride > heads * hd), which rope leaves alone.
const Layout kLayouts[] = {
    {12, 4, 0, 3 * 16 + 8, 3, 16},  // 3 batches of 4 positions; 8 columns untouched per row
    {5, 1, 37, 64, 2, 32},          // decode: one position, 37, for every row
    {70, 70, 0, 2 * 128, 2, 128},   // Llama's head size
    {9, 3, 5, 2, 1, 2},             // one pair per head
};

constexpr float kTheta = 10000.0f;

double max_abs(const Vec& x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

TEST(Rope, MatchesReferenceAndHuggingFacesFormula) {
  for (const Layout& l : kLayouts) {
    for (const bool inverse : {false, true}) {
      const Vec x = test::random_normal(l.rows * l.stride, static_cast<uint32_t>(l.hd + l.rows));
      Vec fast = x, ref = x;
      cpu::rope(fast.data(), l.rows, l.T, l.pos0, l.stride, l.heads, l.hd, kTheta, inverse);
      cpu::ref::rope(ref.data(), l.rows, l.T, l.pos0, l.stride, l.heads, l.hd, kTheta, inverse);
      // Both turn by the same float cos and sin; the fast kernel rounds each of its two
      // products and their sum (3 roundings of terms no larger than |a| + |b|), the reference
      // once: 4 * 2^-24 of the largest input bounds the difference.
      test::expect_close(fast, ref, 0.0f, static_cast<float>(4 * 0x1p-24 * 2 * max_abs(x)),
                         "fast vs ref");
      // Hugging Face (LlamaRotaryEmbedding, apply_rotary_pos_emb): inv_freq = theta^(-2i/hd),
      // angle = position * inv_freq, out = x * cos + rotate_half(x) * sin with rotate_half(x) =
      // [-x2, x1], the head's halves x1 and x2. Here in double; the kernels' float angles err
      // by position * 2^-24 radians at most, which bounds the tolerance.
      const int64_t half = l.hd / 2;
      Vec hf = x;
      for (int64_t r = 0; r < l.rows; ++r) {
        const double pos = static_cast<double>(l.pos0 + r % l.T);
        for (int64_t h = 0; h < l.heads; ++h) {
          const float* in = &x[r * l.stride + h * l.hd];
          float* out = &hf[r * l.stride + h * l.hd];
          for (int64_t d = 0; d < l.hd; ++d) {
            const int64_t i = d % half;
            const double angle =
                (inverse ? -pos : pos) *
                std::pow(double{kTheta}, -2.0 * static_cast<double>(i) / static_cast<double>(l.hd));
            const double rotated = d < half ? -in[d + half] : in[d - half];
            out[d] = static_cast<float>(in[d] * std::cos(angle) + rotated * std::sin(angle));
          }
        }
      }
      const double angle_error = static_cast<double>(l.pos0 + l.T) * 0x1p-23;
      test::expect_close(ref, hf, 0.0f,
                         static_cast<float>(2 * max_abs(x) * (angle_error + 0x1p-22)),
                         "ref vs Hugging Face's formula");
      for (int64_t r = 0; r < l.rows; ++r)  // the columns after the heads: untouched
        for (int64_t c = l.heads * l.hd; c < l.stride; ++c)
          ASSERT_EQ(fast[r * l.stride + c], x[r * l.stride + c]);
    }
  }
}

TEST(Rope, PositionZeroIsTheIdentityAndInverseTurnsBack) {
  const int64_t hd = 64, heads = 4, rows = 16, stride = heads * hd;
  const Vec x = test::random_normal(rows * stride, 7);
  Vec y = x;
  cpu::rope(y.data(), rows, 1, 0, stride, heads, hd, kTheta, false);  // every row at position 0
  EXPECT_TRUE(test::same_bits(y, x));  // cos 0 = 1 and sin 0 = 0 exactly
  y = x;
  cpu::rope(y.data(), rows, rows, 100, stride, heads, hd, kTheta, false);
  double norm_x = 0, norm_y = 0;
  for (size_t i = 0; i < x.size(); ++i)
    norm_x += double{x[i]} * x[i], norm_y += double{y[i]} * y[i];
  EXPECT_NEAR(norm_y, norm_x, 1e-5 * norm_x);  // a rotation keeps lengths
  cpu::rope(y.data(), rows, rows, 100, stride, heads, hd, kTheta, true);
  test::expect_close(y, x, 0.0f, static_cast<float>(8 * 0x1p-24 * max_abs(x)), "inverse");
}

// What makes rotary embeddings relative: q at position p and k at position p' score the same
// as at p + s and p' + s.
TEST(Rope, ScoresDependOnlyOnTheDistance) {
  const int64_t hd = 32;
  const Vec q = test::random_normal(hd, 1), k = test::random_normal(hd, 2);
  const auto score = [&](int64_t pq, int64_t pk) {
    Vec a = q, b = k;
    cpu::ref::rope(a.data(), 1, 1, pq, hd, 1, hd, kTheta, false);
    cpu::ref::rope(b.data(), 1, 1, pk, hd, 1, hd, kTheta, false);
    double dot = 0;
    for (int64_t d = 0; d < hd; ++d) dot += double{a[d]} * b[d];
    return dot;
  };
  for (const int64_t shift : {1, 10, 50}) {
    EXPECT_NEAR(score(7, 3), score(7 + shift, 3 + shift), 1e-4);
    EXPECT_NEAR(score(20, 20), score(20 + shift, 20 + shift), 1e-4);
  }
  EXPECT_GT(std::fabs(score(7, 3) - score(7, 4)), 1e-3);  // but they do depend on the distance
}

}  // namespace
}  // namespace fp8lm
