// Flash-style causal attention. One OpenMP iteration per (batch, head) pair with a static
// schedule: every output element is written by one thread in a fixed order, so results are
// bit-identical from run to run and for any thread count.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8lm::cpu {
namespace {

// A tile of 64 keys at hd <= 128 is at most 32 KiB transposed: it stays in cache while every
// query of a block is scored against it, and the score row (64 floats) stays in L1.
constexpr int64_t kKeyTile = 64;
constexpr int64_t kQueryBlock = 64;

float inverse_sqrt_head_dim(int64_t hd) {
  return 1.0f / std::sqrt(static_cast<float>(hd));
}

// Copies n strided rows of hd values into a [hd, kKeyTile] tile, so that scoring a query against
// the tile is a run of axpys over contiguous keys: those vectorize at -O3, whereas a per-key
// dot product is a float reduction that GCC won't reorder without -ffast-math.
void transpose_tile(float* tile, const float* rows, int64_t row_stride, int64_t n, int64_t hd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < hd; ++d) tile[d * kKeyTile + j] = rows[j * row_stride + d];
}

// scores[j] = scale * (x . column j of the tile), for j in [0, n).
void score_row(float* scores, const float* x, const float* tile, int64_t n, int64_t hd,
               float scale) {
  std::fill(scores, scores + n, 0.0f);
  for (int64_t d = 0; d < hd; ++d) {
    const float xd = x[d] * scale;
    const float* column = tile + d * kKeyTile;
    for (int64_t j = 0; j < n; ++j) scores[j] += xd * column[j];
  }
}

void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

struct ForwardScratch {
  explicit ForwardScratch(int64_t hd)
      : key_tile(kKeyTile * hd),
        scores(kKeyTile),
        acc(kQueryBlock * hd),
        row_max(kQueryBlock),
        row_sum(kQueryBlock) {}
  std::vector<float> key_tile, scores, acc, row_max, row_sum;
};

// Attends nq <= kQueryBlock consecutive queries, the first at position first_pos, each to keys
// 0..its own position. Rows are strided so that the same code reads the packed qkv tensor and the
// KV cache: decode then matches forward's last row exactly. lse may be null (decode).
void attend_query_block(float* out, int64_t out_stride, float* lse, const float* q,
                        int64_t q_stride, int64_t nq, int64_t first_pos, const float* k,
                        const float* v, int64_t kv_stride, int64_t hd, ForwardScratch& s) {
  const float scale = inverse_sqrt_head_dim(hd);
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  std::fill(s.row_max.begin(), s.row_max.end(), -std::numeric_limits<float>::infinity());
  std::fill(s.row_sum.begin(), s.row_sum.end(), 0.0f);
  float* scores = s.scores.data();
  const int64_t n_keys = first_pos + nq;  // what the block's last query sees
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t tile_len = std::min(kKeyTile, n_keys - j0);
    transpose_tile(s.key_tile.data(), k + j0 * kv_stride, kv_stride, tile_len, hd);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t visible = std::min(tile_len, first_pos + i + 1 - j0);
      if (visible <= 0) continue;
      score_row(scores, q + i * q_stride, s.key_tile.data(), visible, hd, scale);
      float& running_max = s.row_max[i];
      float& running_sum = s.row_sum[i];
      float* acc = s.acc.data() + i * hd;
      const float tile_max = *std::max_element(scores, scores + visible);
      if (tile_max > running_max) {
        // Re-base what earlier tiles accumulated on the new maximum so exp never overflows
        // (on the first tile exp(-inf) = 0 and acc is still zero).
        const float rescale = std::exp(running_max - tile_max);
        running_sum *= rescale;
        for (int64_t d = 0; d < hd; ++d) acc[d] *= rescale;
        running_max = tile_max;
      }
      for (int64_t j = 0; j < visible; ++j) {
        const float p = std::exp(scores[j] - running_max);
        running_sum += p;
        axpy(acc, p, v + (j0 + j) * kv_stride, hd);
      }
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    const float inv_sum = 1.0f / s.row_sum[i];
    const float* acc = s.acc.data() + i * hd;
    float* out_row = out + i * out_stride;
    for (int64_t d = 0; d < hd; ++d) out_row[d] = acc[d] * inv_sum;
    if (lse) lse[i] = s.row_max[i] + std::log(s.row_sum[i]);
  }
}

struct BackwardScratch {
  BackwardScratch(int64_t hd, int64_t T)
      : key_tile(kKeyTile * hd),
        value_tile(kKeyTile * hd),
        probs(kKeyTile),
        dprobs(kKeyTile),
        dk(kKeyTile * hd),
        dv(kKeyTile * hd),
        delta(T) {}
  std::vector<float> key_tile, value_tile, probs, dprobs, dk, dv, delta;
};

// Gradients of one (batch, head): key tiles outer so each tile's dk and dv finish in scratch
// and are written once; dq rows, owned by this head alone, accumulate across tiles in place.
void backward_one_head(float* dqkv, const float* dout, const float* qkv, const float* out,
                       const float* lse, int64_t b, int64_t h, int64_t T, int64_t C, int64_t H,
                       BackwardScratch& s) {
  const int64_t hd = C / H;
  const int64_t row = 3 * C;
  const float scale = inverse_sqrt_head_dim(hd);
  const float* q = qkv + b * T * row + h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  float* dq = dqkv + b * T * row + h * hd;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  const float* dout_h = dout + b * T * C + h * hd;
  const float* out_h = out + b * T * C + h * hd;
  const float* lse_h = lse + (b * H + h) * T;

  // delta_i = dout_i . out_i = sum_j p_ij dp_ij: the softmax Jacobian's shared term per row.
  for (int64_t i = 0; i < T; ++i) {
    float dot = 0.0f;
    for (int64_t d = 0; d < hd; ++d) dot += dout_h[i * C + d] * out_h[i * C + d];
    s.delta[i] = dot;
    std::fill(dq + i * row, dq + i * row + hd, 0.0f);
  }

  float* probs = s.probs.data();
  float* dprobs = s.dprobs.data();
  for (int64_t j0 = 0; j0 < T; j0 += kKeyTile) {
    const int64_t tile_len = std::min(kKeyTile, T - j0);
    transpose_tile(s.key_tile.data(), k + j0 * row, row, tile_len, hd);
    transpose_tile(s.value_tile.data(), v + j0 * row, row, tile_len, hd);
    std::fill(s.dk.begin(), s.dk.end(), 0.0f);
    std::fill(s.dv.begin(), s.dv.end(), 0.0f);
    for (int64_t i = j0; i < T; ++i) {  // queries before j0 see none of this tile
      const int64_t visible = std::min(tile_len, i + 1 - j0);
      const float* q_i = q + i * row;
      const float* dout_i = dout_h + i * C;
      float* dq_i = dq + i * row;
      score_row(probs, q_i, s.key_tile.data(), visible, hd, scale);
      for (int64_t j = 0; j < visible; ++j) probs[j] = std::exp(probs[j] - lse_h[i]);
      score_row(dprobs, dout_i, s.value_tile.data(), visible, hd, 1.0f);
      for (int64_t j = 0; j < visible; ++j) {
        // The score scale is folded into ds once, for both dq and dk.
        const float dscore = probs[j] * (dprobs[j] - s.delta[i]) * scale;
        axpy(s.dv.data() + j * hd, probs[j], dout_i, hd);
        axpy(s.dk.data() + j * hd, dscore, q_i, hd);
        axpy(dq_i, dscore, k + (j0 + j) * row, hd);
      }
    }
    for (int64_t j = 0; j < tile_len; ++j) {
      std::copy_n(s.dk.data() + j * hd, hd, dk + (j0 + j) * row);
      std::copy_n(s.dv.data() + j * hd, hd, dv + (j0 + j) * row);
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H) {
  const int64_t hd = C / H;
  const int64_t row = 3 * C;
#pragma omp parallel
  {
    ForwardScratch scratch(hd);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv + b * T * row + h * hd;
        for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
          attend_query_block(out + (b * T + i0) * C + h * hd, C, lse + (b * H + h) * T + i0,
                             q + i0 * row, row, std::min(kQueryBlock, T - i0), i0, q + C, q + 2 * C,
                             row, hd, scratch);
        }
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H) {
  const int64_t hd = C / H;
#pragma omp parallel
  {
    BackwardScratch scratch(hd, T);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        backward_one_head(dqkv, dout, qkv, out, lse, b, h, T, C, H, scratch);
      }
    }
  }
}

void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H) {
  const int64_t hd = C / H;
#pragma omp parallel
  {
    ForwardScratch scratch(hd);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t cache = b * Tmax * C + h * hd;
        attend_query_block(out + b * C + h * hd, C, nullptr, q + b * C + h * hd, C, 1, len - 1,
                           k_cache + cache, v_cache + cache, C, hd, scratch);
      }
    }
  }
}

}  // namespace fp8lm::cpu
