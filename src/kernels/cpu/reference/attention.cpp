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
                       int64_t H) {
  const int64_t hd = C / H;
  const int64_t row = 3 * C;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* q = qkv + b * T * row + h * hd;
      for (int64_t i = 0; i < T; ++i) {
        attend_one_query(out + (b * T + i) * C + h * hd, lse + (b * H + h) * T + i, q + i * row,
                         q + C, q + 2 * C, row, i + 1, hd);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H) {
  const int64_t hd = C / H;
  const int64_t row = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> dq(T * hd), dk(T * hd), dv(T * hd);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* q = qkv + b * T * row + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const float* dout_h = dout + b * T * C + h * hd;
      const float* out_h = out + b * T * C + h * hd;
      std::fill(dq.begin(), dq.end(), 0.0);
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
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
      float* dq_h = dqkv + b * T * row + h * hd;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < hd; ++d) {
          dq_h[t * row + d] = static_cast<float>(dq[t * hd + d]);
          dq_h[t * row + C + d] = static_cast<float>(dk[t * hd + d]);
          dq_h[t * row + 2 * C + d] = static_cast<float>(dv[t * hd + d]);
        }
      }
    }
  }
}

void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H) {
  const int64_t hd = C / H;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t cache = b * Tmax * C + h * hd;
      attend_one_query(out + b * C + h * hd, nullptr, q + b * C + h * hd, k_cache + cache,
                       v_cache + cache, C, len, hd);
    }
  }
}

}  // namespace fp8lm::cpu::ref
