#include "kernels/cpu/attention_unfused.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"

namespace fp8lm::cpu {
namespace {

// Head h's q (at lay.q(h)), k or v columns, copied to a contiguous [T, hd] matrix, or written
// back from one (with add, summed into what is there: a key/value group's gradient).
void gather_head(float* dst, const float* qkv, int64_t b, int64_t offset, int64_t T,
                 const QkvLayout& lay) {
  for (int64_t t = 0; t < T; ++t) {
    const float* src = qkv + (b * T + t) * lay.row + offset;
    for (int64_t d = 0; d < lay.hd; ++d) dst[t * lay.hd + d] = src[d];
  }
}

void scatter_head(float* dst, int64_t row_stride, const float* src, int64_t b, int64_t offset,
                  int64_t T, int64_t hd, bool add = false) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = dst + (b * T + t) * row_stride + offset;
    for (int64_t d = 0; d < hd; ++d) row[d] = add ? row[d] + src[t * hd + d] : src[t * hd + d];
  }
}

struct HeadBuffers {
  std::vector<float> q, k, v, o, d1, d2, d3, ds;
  explicit HeadBuffers(int64_t T, int64_t hd)
      : q(T * hd), k(T * hd), v(T * hd), o(T * hd), d1(T * hd), d2(T * hd), d3(T * hd), ds(T * T) {}
};

}  // namespace

void attention_forward_unfused(float* out, float* probs, const float* qkv, int64_t B, int64_t T,
                               int64_t C, int64_t H, int64_t Hkv) {
  const QkvLayout lay(C, H, Hkv);
  const int64_t hd = lay.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  HeadBuffers buf(T, hd);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* p = probs + (b * H + h) * T * T;
      gather_head(buf.q.data(), qkv, b, lay.q(h), T, lay);
      gather_head(buf.k.data(), qkv, b, lay.k(h), T, lay);
      gather_head(buf.v.data(), qkv, b, lay.v(h), T, lay);
      gemm_f32(Trans::N, Trans::T, T, T, hd, scale, buf.q.data(), buf.k.data(), 0.0f, p);
#pragma omp parallel for schedule(static) if (T * T >= (1 << 15))
      for (int64_t i = 0; i < T; ++i) {  // causal softmax of row i over keys 0..i
        float* row = p + i * T;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) m = std::max(m, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - m));
        for (int64_t j = 0; j <= i; ++j) row[j] /= sum;
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      gemm_f32(Trans::N, Trans::N, T, hd, T, 1.0f, p, buf.v.data(), 0.0f, buf.o.data());
      scatter_head(out, C, buf.o.data(), b, h * hd, T, hd);
    }
  }
}

void attention_backward_unfused(float* dqkv, const float* dout, const float* qkv,
                                const float* probs, int64_t B, int64_t T, int64_t C, int64_t H,
                                int64_t Hkv) {
  const QkvLayout lay(C, H, Hkv);
  const int64_t hd = lay.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  HeadBuffers buf(T, hd);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* p = probs + (b * H + h) * T * T;
      gather_head(buf.q.data(), qkv, b, lay.q(h), T, lay);
      gather_head(buf.k.data(), qkv, b, lay.k(h), T, lay);
      gather_head(buf.v.data(), qkv, b, lay.v(h), T, lay);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hd; ++d) buf.o[t * hd + d] = dout[(b * T + t) * C + h * hd + d];
      float* dp = buf.ds.data();
      // dP = dO · Vᵀ, dV = Pᵀ · dO.
      gemm_f32(Trans::N, Trans::T, T, T, hd, 1.0f, buf.o.data(), buf.v.data(), 0.0f, dp);
      gemm_f32(Trans::T, Trans::N, T, hd, T, 1.0f, p, buf.o.data(), 0.0f, buf.d3.data());
      // dS = P ∘ (dP - rowsum(P ∘ dP)), with the score scale folded in for dQ and dK.
#pragma omp parallel for schedule(static) if (T * T >= (1 << 15))
      for (int64_t i = 0; i < T; ++i) {
        const float* pr = p + i * T;
        float* dr = dp + i * T;
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j < T; ++j) dr[j] = j <= i ? pr[j] * (dr[j] - dot) * scale : 0.0f;
      }
      gemm_f32(Trans::N, Trans::N, T, hd, T, 1.0f, dp, buf.k.data(), 0.0f, buf.d1.data());
      gemm_f32(Trans::T, Trans::N, T, hd, T, 1.0f, dp, buf.q.data(), 0.0f, buf.d2.data());
      // The group's first head writes its key/value gradients, the others add theirs.
      const bool add = h % lay.group != 0;
      scatter_head(dqkv, lay.row, buf.d1.data(), b, lay.q(h), T, hd);
      scatter_head(dqkv, lay.row, buf.d2.data(), b, lay.k(h), T, hd, add);
      scatter_head(dqkv, lay.row, buf.d3.data(), b, lay.v(h), T, hd, add);
    }
  }
}

}  // namespace fp8lm::cpu
