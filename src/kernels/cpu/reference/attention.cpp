// The oracle for attention: plain loops, double accumulation, no threads, the softmax of each
// query taken in one piece (max, then sum) rather than online. Every fast kernel is tested
// against these.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8lm::cpu::ref {
namespace {

double dot(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d) sum += static_cast<double>(a[d]) * static_cast<double>(b[d]);
  return sum;
}

// One query against keys [0, n_keys) of strided k and v rows; lse may be null.
void attend_one_query(float* out, float* lse, const float* q, const float* k, const float* v,
                      int64_t kv_stride, int64_t n_keys, int64_t hd) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> scores(n_keys);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n_keys; ++j) {
    scores[j] = scale * dot(q, k + j * kv_stride, hd);
    max_score = std::max(max_score, scores[j]);
  }
  double sum = 0.0;
  std::vector<double> acc(hd, 0.0);
  for (int64_t j = 0; j < n_keys; ++j) {
    const double p = std::exp(scores[j] - max_score);
    sum += p;
    for (int64_t d = 0; d < hd; ++d) acc[d] += p * static_cast<double>(v[j * kv_stride + d]);
  }
  for (int64_t d = 0; d < hd; ++d) out[d] = static_cast<float>(acc[d] / sum);
  if (lse) *lse = static_cast<float>(max_score + std::log(sum));
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv) {
  const QkvLayout lay(C, H, Hkv);
  const int64_t row = lay.row;
  for (int64_t b = 0; b < B; ++b) {
    const float* base = qkv + b * T * row;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        attend_one_query(out + (b * T + i) * C + h * lay.hd, lse + (b * H + h) * T + i,
                         base + lay.q(h) + i * row, base + lay.k(h), base + lay.v(h), row, i + 1,
                         lay.hd);
      }
    }
  }
}

// Each query head's gradients in double; a key/value head's sum over its group, in double
// too, before the one rounding to float.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv) {
  const QkvLayout lay(C, H, Hkv);
  const int64_t hd = lay.hd, row = lay.row;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> dq(T * hd), dk(T * hd), dv(T * hd);
  for (int64_t b = 0; b < B; ++b) {
    const float* base = qkv + b * T * row;
    float* dbase = dqkv + b * T * row;
    for (int64_t h = 0; h < H; ++h) {
      const float* q = base + lay.q(h);
      const float* k = base + lay.k(h);
      const float* v = base + lay.v(h);
      const float* dout_h = dout + b * T * C + h * hd;
      const float* out_h = out + b * T * C + h * hd;
      std::fill(dq.begin(), dq.end(), 0.0);
      if (h % lay.group == 0) {
        std::fill(dk.begin(), dk.end(), 0.0);
        std::fill(dv.begin(), dv.end(), 0.0);
      }
      for (int64_t i = 0; i < T; ++i) {
        const float* q_i = q + i * row;
        const float* dout_i = dout_h + i * C;
        const double delta = dot(dout_i, out_h + i * C, hd);
        const double lse_i = lse[(b * H + h) * T + i];
        for (int64_t j = 0; j <= i; ++j) {
          const float* k_j = k + j * row;
          const double p = std::exp(scale * dot(q_i, k_j, hd) - lse_i);
          const double dp = dot(dout_i, v + j * row, hd);
          const double dscore = p * (dp - delta);
          for (int64_t d = 0; d < hd; ++d) {
            dv[j * hd + d] += p * static_cast<double>(dout_i[d]);
            dq[i * hd + d] += dscore * scale * static_cast<double>(k_j[d]);
            dk[j * hd + d] += dscore * scale * static_cast<double>(q_i[d]);
          }
        }
      }
      const bool last_of_group = h % lay.group == lay.group - 1;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < hd; ++d) {
          dbase[t * row + lay.q(h) + d] = static_cast<float>(dq[t * hd + d]);
          if (!last_of_group) continue;
          dbase[t * row + lay.k(h) + d] = static_cast<float>(dk[t * hd + d]);
          dbase[t * row + lay.v(h) + d] = static_cast<float>(dv[t * hd + d]);
        }
      }
    }
  }
}

void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv) {
  const QkvLayout lay(C, H, Hkv);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t cache = b * Tmax * lay.Ckv + h / lay.group * lay.hd;
      attend_one_query(out + b * C + h * lay.hd, nullptr, q + b * C + h * lay.hd, k_cache + cache,
                       v_cache + cache, lay.Ckv, len, lay.hd);
    }
  }
}

}  // namespace fp8lm::cpu::ref
