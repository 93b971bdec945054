// Flash-style causal attention. One OpenMP iteration per (batch, head) pair (backward: per
// (batch, key/value head)) with a static schedule: every output element is written by one thread in
// a fixed order, so results are bit-identical from run to run and for any thread count. The
// arithmetic on each query block x key tile goes through a kernel set (attention_isa.h): AVX-512
// where the CPU has it, else the generic one below.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_isa.h"
#include "kernels/cpu/bf16_probe.h"

namespace fp8lm::cpu {
namespace {

// Also the row stride of scratch rows hd long: whole 16-float vectors, 64-byte aligned.
int64_t round_up_16(int64_t n) {
  return (n + 15) / 16 * 16;
}

}  // namespace

namespace attention_tiles {
namespace {

// The generic kernel set: plain loops, the inner ones over contiguous floats so that GCC
// vectorizes them for whatever the build targets.

void transpose_tile(float* dst, const float* rows, int64_t stride, int64_t n, int64_t hd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < hd; ++d) dst[d * kKeyTile + j] = rows[j * stride + d];
  for (int64_t d = 0; d < hd; ++d)
    std::fill(dst + d * kKeyTile + n, dst + d * kKeyTile + round_up_16(n), 0.0f);
}

void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
               int64_t hd) {
  for (int64_t r = 0; r < n; ++r) std::copy_n(src + r * src_stride, hd, dst + r * dst_stride);
}

// Sixteen floats: a chunk of a row that GCC keeps in registers across a loop, where a whole row
// would be loaded and stored again on every step.
constexpr int64_t kChunk = 16;

// Scores a chunk of keys at a time as a run of axpys over contiguous keys of the transposed
// tile: those vectorize, whereas a per-key dot product is a float reduction GCC won't reorder.
void scores(float* s, const float* x, int64_t x_stride, int64_t nq, const float* tile_t, int64_t hd,
            float scale, Visibility vis) {
  for (int64_t r = 0; r < nq; ++r) {
    const float* x_r = x + r * x_stride;
    for (int64_t j0 = 0; j0 < vis.visible(r); j0 += kChunk) {  // the tile is zero-padded to 16
      float acc[kChunk] = {};
      for (int64_t d = 0; d < hd; ++d) {
        const float xd = x_r[d];
        const float* column = tile_t + d * kKeyTile + j0;
        for (int64_t j = 0; j < kChunk; ++j) acc[j] += xd * column[j];
      }
      for (int64_t j = 0; j < kChunk; ++j) s[r * kKeyTile + j0 + j] = acc[j] * scale;
    }
  }
}

void softmax_forward(float* s, float* row_max, float* row_sum, float* alpha, int64_t nq,
                     Visibility vis) {
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t n = vis.visible(r);
    float* row = s + r * kKeyTile;
    // On the first tile the old maximum is -inf, so alpha = exp(-inf) = 0 clears nothing that
    // isn't already zero; after that, re-basing on the new maximum keeps exp from overflowing.
    const float new_max = std::max(row_max[r], *std::max_element(row, row + n));
    alpha[r] = std::exp(row_max[r] - new_max);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - new_max));
    row_max[r] = new_max;
    row_sum[r] = row_sum[r] * alpha[r] + sum;
  }
}

void finish_rows(float* out, int64_t out_stride, float* lse, const float* acc, int64_t acc_stride,
                 const float* row_max, const float* row_sum, int64_t nq, int64_t hd) {
  for (int64_t r = 0; r < nq; ++r) {
    const float inv_sum = 1.0f / row_sum[r];
    for (int64_t d = 0; d < hd; ++d) out[r * out_stride + d] = acc[r * acc_stride + d] * inv_sum;
    if (lse) lse[r] = row_max[r] + std::log(row_sum[r]);
  }
}

void softmax_backward(float* p, float* ds, const float* lse, const float* delta, int64_t nq,
                      float scale, Visibility vis) {
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t n = vis.visible(r);
    float* p_r = p + r * kKeyTile;
    float* ds_r = ds + r * kKeyTile;
    for (int64_t j = 0; j < n; ++j) {
      p_r[j] = std::exp(p_r[j] - lse[r]);
      ds_r[j] = p_r[j] * (ds_r[j] - delta[r]) * scale;
    }
    std::fill(p_r + n, p_r + round_up_16(vis.n), 0.0f);
    std::fill(ds_r + n, ds_r + round_up_16(vis.n), 0.0f);
  }
}

// y[0, w) = y0 + sum over i in [begin, end), in order, of weight(i) * row(i)[0, w), with y0 zero
// (overwrite, y then unread) or y * y_scale.
template <class Weight, class Row>
void weighted_sum(float* y, int64_t w, bool overwrite, float y_scale, int64_t begin, int64_t end,
                  Weight weight, Row row) {
  if (w == kChunk) {
    float acc[kChunk];
    for (int64_t d = 0; d < kChunk; ++d) acc[d] = overwrite ? 0.0f : y[d] * y_scale;
    for (int64_t i = begin; i < end; ++i) {
      const float a = weight(i);
      const float* x = row(i);
      for (int64_t d = 0; d < kChunk; ++d) acc[d] += a * x[d];
    }
    std::copy_n(acc, kChunk, y);
    return;
  }
  for (int64_t d = 0; d < w; ++d) y[d] = overwrite ? 0.0f : y[d] * y_scale;
  for (int64_t i = begin; i < end; ++i) {
    const float a = weight(i);
    const float* x = row(i);
    for (int64_t d = 0; d < w; ++d) y[d] += a * x[d];
  }
}

void accumulate_rows(float* y, int64_t y_stride, const float* alpha, bool overwrite, const float* p,
                     int64_t nq, const float* x, int64_t x_stride, int64_t hd, Visibility vis) {
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t d0 = 0; d0 < hd; d0 += kChunk) {
      weighted_sum(
          y + r * y_stride + d0, std::min(kChunk, hd - d0), overwrite, alpha ? alpha[r] : 1.0f, 0,
          vis.visible(r), [&](int64_t j) { return p[r * kKeyTile + j]; },
          [&](int64_t j) { return x + j * x_stride + d0; });
    }
  }
}

void accumulate_columns(float* y, int64_t y_stride, bool overwrite, const float* p, int64_t nq,
                        const float* x, int64_t x_stride, int64_t hd, Visibility vis) {
  for (int64_t j = 0; j < vis.n; ++j) {
    const int64_t first_row = std::max<int64_t>(0, j - vis.first + 1);  // earlier rows don't see j
    for (int64_t d0 = 0; d0 < hd; d0 += kChunk) {
      weighted_sum(
          y + j * y_stride + d0, std::min(kChunk, hd - d0), overwrite, 1.0f, first_row, nq,
          [&](int64_t r) { return p[r * kKeyTile + j]; },
          [&](int64_t r) { return x + r * x_stride + d0; });
    }
  }
}

void row_dots(float* dots, const float* a, const float* b, int64_t stride, int64_t n, int64_t hd) {
  for (int64_t i = 0; i < n; ++i) {
    float dot = 0.0f;
    for (int64_t d = 0; d < hd; ++d) dot += a[i * stride + d] * b[i * stride + d];
    dots[i] = dot;
  }
}

}  // namespace

const Kernels& generic_kernels() {
  static const Kernels k{transpose_tile,  copy_rows,          scores,
                         softmax_forward, finish_rows,        softmax_backward,
                         accumulate_rows, accumulate_columns, row_dots};
  return k;
}

}  // namespace attention_tiles

namespace {

using attention_tiles::Kernels;
using attention_tiles::kKeyTile;
using attention_tiles::Visibility;

// Queries per block. A block's scores and weights (64 x 64 floats) and its output accumulator
// (64 x hd) stay in L1/L2 while the block walks the key tiles.
constexpr int64_t kQueryBlock = 64;
static_assert(kQueryBlock % kKeyTile == 0, "query blocks must start on a key tile boundary");

const Kernels& kernels_for(AttentionIsa isa) {
  return isa == AttentionIsa::kGeneric ? attention_tiles::generic_kernels()
                                       : avx512::attention_kernels();
}

// The kernel sets give the same bits, so the choice is speed alone: VDPBF16PS where it issues
// more FLOPs than FMAs (bf16_probe.h measures both), else the FMA set.
AttentionIsa best_isa() {
  static const AttentionIsa isa = [] {
    if (!cpu_features().avx512) return AttentionIsa::kGeneric;
    const Bf16Throughput& t = bf16_throughput();
    return t.dpbf16_gflops > t.fma_gflops ? AttentionIsa::kAvx512Bf16 : AttentionIsa::kAvx512Fma;
  }();
  return isa;
}

float inverse_sqrt_head_dim(int64_t hd) {
  return 1.0f / std::sqrt(static_cast<float>(hd));
}

// Blocks of at least this many queries copy the value tile out of its strided home.
constexpr int64_t kMinRowsToCopy = 8;

// Per-thread scratch that grows to the largest shape seen and is then reused: steady-state calls
// allocate nothing. Pointers are 64-byte aligned (a cache line, one AVX-512 vector).
template <class T>
class TileScratch {
 public:
  static_assert(sizeof(T) == 4, "16 elements to a cache line");
  T* get(size_t n) {
    if (storage_.size() < n + 15) storage_.resize(n + 15);
    const auto misalign = reinterpret_cast<uintptr_t>(storage_.data()) % 64;
    return storage_.data() + (64 - misalign) % 64 / sizeof(T);
  }

 private:
  std::vector<T> storage_;
};
using Scratch = TileScratch<float>;
using PairScratch = TileScratch<uint32_t>;

struct ForwardBuffers {
  float *tile_t, *values, *scores, *acc, *row_max, *row_sum, *alpha;
};

ForwardBuffers forward_buffers(int64_t hd) {
  thread_local Scratch tile_t, values, scores, acc, stats;
  float* s = stats.get(3 * kQueryBlock);
  return {tile_t.get(hd * kKeyTile),
          values.get(kKeyTile * round_up_16(hd)),
          scores.get(kQueryBlock * kKeyTile),
          acc.get(kQueryBlock * round_up_16(hd)),
          s,
          s + kQueryBlock,
          s + 2 * kQueryBlock};
}

// Attends nq <= kQueryBlock consecutive queries, the first at position first_pos, each to keys
// 0..its own position. Rows are strided so that the same code reads the packed qkv tensor and the
// KV cache, and a query's arithmetic depends only on its position, not on the rest of its block:
// decode then matches forward's last row bit for bit. lse may be null (decode).
void attend_query_block(const Kernels& kern, float* out, int64_t out_stride, float* lse,
                        const float* q, int64_t q_stride, int64_t nq, int64_t first_pos,
                        const float* k, const float* v, int64_t kv_stride, int64_t hd) {
  const float scale = inverse_sqrt_head_dim(hd);
  const int64_t ld = round_up_16(hd);
  const ForwardBuffers buf = forward_buffers(hd);
  std::fill(buf.row_max, buf.row_max + nq, -std::numeric_limits<float>::infinity());
  std::fill(buf.row_sum, buf.row_sum + nq, 0.0f);
  const int64_t n_keys = first_pos + nq;  // what the block's last query sees
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    // j0 <= first_pos (blocks start on a tile boundary, decode has one query), so every row
    // sees at least the tile's first key.
    const Visibility vis{first_pos + 1 - j0, std::min(kKeyTile, n_keys - j0)};
    kern.transpose_tile(buf.tile_t, k + j0 * kv_stride, kv_stride, vis.n, hd);
    kern.scores(buf.scores, q, q_stride, nq, buf.tile_t, hd, scale, vis);
    kern.softmax_forward(buf.scores, buf.row_max, buf.row_sum, buf.alpha, nq, vis);
    // Every query of a block re-reads the tile's values, so a block of more than a few copies
    // them out first; decode's single query reads them in place.
    const float* values = v + j0 * kv_stride;
    int64_t values_stride = kv_stride;
    if (nq >= kMinRowsToCopy) {
      kern.copy_rows(buf.values, ld, values, kv_stride, vis.n, hd);
      values = buf.values;
      values_stride = ld;
    }
    kern.accumulate_rows(buf.acc, ld, buf.alpha, /*overwrite=*/j0 == 0, buf.scores, nq, values,
                         values_stride, hd, vis);
  }
  kern.finish_rows(out, out_stride, lse, buf.acc, ld, buf.row_max, buf.row_sum, nq, hd);
}

struct BackwardBuffers {
  float *key_t, *value_t, *keys, *queries, *douts, *probs, *dscores, *delta;
};

BackwardBuffers backward_buffers(int64_t hd, int64_t T) {
  thread_local Scratch key_t, value_t, keys, queries, douts, probs, dscores, delta;
  const int64_t rows = kKeyTile * round_up_16(hd);
  static_assert(kQueryBlock == kKeyTile, "row buffers are sized for either");
  return {key_t.get(hd * kKeyTile),
          value_t.get(hd * kKeyTile),
          keys.get(rows),
          queries.get(rows),
          douts.get(rows),
          probs.get(kQueryBlock * kKeyTile),
          dscores.get(kQueryBlock * kKeyTile),
          delta.get(T)};
}

// One (batch, query head)'s operands of backward; q, k and v in FP32 or, for the BF16 set, as
// saved in BF16.
template <class Src = float>
struct BackwardHead {
  const Src *q, *k, *v;
  const float *dout, *out, *lse;
  float *dq, *dk, *dv;
  bool first_of_group;
};

template <class Src>
BackwardHead<Src> backward_head(float* dqkv, const float* dout, const Src* qkv, const float* out,
                                const float* lse, int64_t b, int64_t h, int64_t T,
                                const QkvLayout& lay, int64_t H) {
  const Src* base = qkv + b * T * lay.row;
  float* dbase = dqkv + b * T * lay.row;
  const int64_t at = b * T * lay.C + h * lay.hd;
  return {base + lay.q(h),  base + lay.k(h),       base + lay.v(h),  dout + at,
          out + at,         lse + (b * H + h) * T, dbase + lay.q(h), dbase + lay.k(h),
          dbase + lay.v(h), h % lay.group == 0};
}

// Gradients of one (batch, query head), accumulated in place: this head alone owns its columns
// of dq, and the heads of a key/value group run one after another on one thread, the first
// overwriting the group's dk and dv and the others adding to them. Key tiles outer, so a tile's
// transposed keys and values are made once; its dk and dv rows start from the first query block
// that sees the tile, dq rows from the first tile.
void backward_one_head(const Kernels& kern, const BackwardHead<>& hv, int64_t T,
                       const QkvLayout& lay) {
  const int64_t hd = lay.hd, C = lay.C, row = lay.row;
  const int64_t ld = round_up_16(hd);
  const float scale = inverse_sqrt_head_dim(hd);
  const bool first_of_group = hv.first_of_group;
  const float *q = hv.q, *k = hv.k, *v = hv.v, *dout_h = hv.dout, *out_h = hv.out, *lse_h = hv.lse;
  float *dq = hv.dq, *dk = hv.dk, *dv = hv.dv;
  const BackwardBuffers buf = backward_buffers(hd, T);

  // delta_i = dout_i . out_i = sum_j p_ij dp_ij: the softmax Jacobian's shared term per row.
  kern.row_dots(buf.delta, dout_h, out_h, C, T, hd);

  for (int64_t j0 = 0; j0 < T; j0 += kKeyTile) {
    const int64_t tile_len = std::min(kKeyTile, T - j0);
    kern.transpose_tile(buf.key_t, k + j0 * row, row, tile_len, hd);
    kern.transpose_tile(buf.value_t, v + j0 * row, row, tile_len, hd);
    kern.copy_rows(buf.keys, ld, k + j0 * row, row, tile_len, hd);
    for (int64_t i0 = j0; i0 < T; i0 += kQueryBlock) {  // queries before j0 see none of the tile
      const int64_t nq = std::min(kQueryBlock, T - i0);
      const Visibility vis{i0 + 1 - j0, tile_len};
      kern.copy_rows(buf.queries, ld, q + i0 * row, row, nq, hd);
      kern.copy_rows(buf.douts, ld, dout_h + i0 * C, C, nq, hd);
      kern.scores(buf.probs, buf.queries, ld, nq, buf.key_t, hd, scale, vis);
      kern.scores(buf.dscores, buf.douts, ld, nq, buf.value_t, hd, 1.0f, vis);
      // The score scale is folded into ds once, for both dq and dk.
      kern.softmax_backward(buf.probs, buf.dscores, lse_h + i0, buf.delta + i0, nq, scale, vis);
      const bool overwrite_kv = first_of_group && i0 == j0;
      kern.accumulate_columns(dv + j0 * row, row, overwrite_kv, buf.probs, nq, buf.douts, ld, hd,
                              vis);
      kern.accumulate_columns(dk + j0 * row, row, overwrite_kv, buf.dscores, nq, buf.queries, ld,
                              hd, vis);
      kern.accumulate_rows(dq + i0 * row, row, nullptr, /*overwrite=*/j0 == 0, buf.dscores, nq,
                           buf.keys, ld, hd, vis);
    }
  }
}

// --- BF16 math (attention_isa.h's Bf16Kernels): the same loops over packed operands ---

const attention_tiles::Bf16Kernels& bf16_kernels_for(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::kAvx512Bf16:
      return avx512::attention_bf16_kernels();
    case AttentionIsa::kAvx512Fma:
      return avx512::attention_bf16_fma_kernels();
    default:
      return attention_tiles::generic_bf16_kernels();
  }
}

// Every query block of a (batch, head) reads all earlier keys and values, so the head's keys are
// packed into tile pairs and its values into row pairs once, not per block.
void attend_head_bf16(const Kernels& kern, const attention_tiles::Bf16Kernels& bk, float* out,
                      int64_t out_stride, float* lse, const float* q, const float* k,
                      const float* v, int64_t row, int64_t T, int64_t hd) {
  const float scale = inverse_sqrt_head_dim(hd);
  const int64_t h = attention_tiles::half_pairs(hd), ld = round_up_16(hd),
                tile_pairs = h * kKeyTile;
  const int64_t tiles = (T + kKeyTile - 1) / kKeyTile;
  thread_local PairScratch key_tiles, value_pairs, query_pairs, weights;
  uint32_t* kt = key_tiles.get(tiles * tile_pairs);
  uint32_t* vp = value_pairs.get((T + 1) / 2 * ld);
  uint32_t* qh = query_pairs.get(kQueryBlock * h);
  uint32_t* p16 = weights.get(kQueryBlock * kKeyTile / 2);
  for (int64_t t = 0; t < tiles; ++t) {
    bk.pack_tile_pairs(kt + t * tile_pairs, k + t * kKeyTile * row, row,
                       std::min(kKeyTile, T - t * kKeyTile), hd);
  }
  bk.pack_row_pairs(vp, ld, v, row, T, hd);
  const ForwardBuffers buf = forward_buffers(hd);
  for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int64_t nq = std::min(kQueryBlock, T - i0);
    bk.pack_half_pairs(qh, h, q + i0 * row, row, nq, hd);
    std::fill(buf.row_max, buf.row_max + nq, -std::numeric_limits<float>::infinity());
    std::fill(buf.row_sum, buf.row_sum + nq, 0.0f);
    for (int64_t j0 = 0; j0 < i0 + nq; j0 += kKeyTile) {
      const Visibility vis{i0 + 1 - j0, std::min(kKeyTile, i0 + nq - j0)};
      bk.scores(buf.scores, qh, h, nq, kt + j0 / kKeyTile * tile_pairs, hd, scale, vis);
      kern.softmax_forward(buf.scores, buf.row_max, buf.row_sum, buf.alpha, nq, vis);
      bk.pack_weight_rows(p16, buf.scores, nq, vis);
      bk.accumulate_rows(buf.acc, ld, buf.alpha, /*overwrite=*/j0 == 0, p16, nq, vp + j0 / 2 * ld,
                         ld, hd, vis);
    }
    kern.finish_rows(out + i0 * out_stride, out_stride, lse + i0, buf.acc, ld, buf.row_max,
                     buf.row_sum, nq, hd);
  }
}

// The packs of q, k and v from their source: FP32, or BF16 as saved.
template <class Src>
struct SourcePacks {
  void (*half)(uint32_t* dst, int64_t dst_stride, const Src* src, int64_t src_stride, int64_t n,
               int64_t hd);
  void (*tile)(uint32_t* dst, const Src* rows, int64_t stride, int64_t n, int64_t hd);
  void (*rows)(uint32_t* dst, int64_t dst_stride, const Src* src, int64_t src_stride, int64_t n,
               int64_t hd);
};
SourcePacks<float> source_packs(const attention_tiles::Bf16Kernels& bk, const float*) {
  return {bk.pack_half_pairs, bk.pack_tile_pairs, bk.pack_row_pairs};
}
SourcePacks<bf16_t> source_packs(const attention_tiles::Bf16Kernels& bk, const bf16_t*) {
  return {bk.pack_half_pairs_bf16, bk.pack_tile_pairs_bf16, bk.pack_row_pairs_bf16};
}

// backward_one_head with BF16 math: the head's queries and output gradients are packed once
// (half pairs for the scores, row pairs for dk and dv), each key tile's keys and values as
// tiles and its keys as row pairs (for dq).
template <class Src>
void backward_head_bf16(const Kernels& kern, const attention_tiles::Bf16Kernels& bk,
                        const BackwardHead<Src>& hv, int64_t T, const QkvLayout& lay) {
  const int64_t hd = lay.hd, C = lay.C, row = lay.row;
  const int64_t hp = attention_tiles::half_pairs(hd), ld = round_up_16(hd);
  const float scale = inverse_sqrt_head_dim(hd);
  const Src *q = hv.q, *k = hv.k, *v = hv.v;
  const float *dout_h = hv.dout, *lse_h = hv.lse;
  const auto src = source_packs(bk, q);
  const BackwardBuffers buf = backward_buffers(hd, T);
  thread_local PairScratch q_half, q_rows, d_half, d_rows, k_tile, v_tile, k_rows, p_pairs,
      ds_pairs, ds_rows;
  uint32_t* qh = q_half.get(T * hp);
  uint32_t* qr = q_rows.get((T + 1) / 2 * ld);
  uint32_t* dh = d_half.get(T * hp);
  uint32_t* dr = d_rows.get((T + 1) / 2 * ld);
  uint32_t* kt = k_tile.get(hp * kKeyTile);
  uint32_t* vt = v_tile.get(hp * kKeyTile);
  uint32_t* kr = k_rows.get(kKeyTile / 2 * ld);
  uint32_t* pp = p_pairs.get(kQueryBlock / 2 * kKeyTile);
  uint32_t* dsp = ds_pairs.get(kQueryBlock / 2 * kKeyTile);
  uint32_t* dsr = ds_rows.get(kQueryBlock * kKeyTile / 2);

  kern.row_dots(buf.delta, dout_h, hv.out, C, T, hd);
  src.half(qh, hp, q, row, T, hd);
  src.rows(qr, ld, q, row, T, hd);
  bk.pack_half_pairs(dh, hp, dout_h, C, T, hd);
  bk.pack_row_pairs(dr, ld, dout_h, C, T, hd);
  for (int64_t j0 = 0; j0 < T; j0 += kKeyTile) {
    const int64_t tile_len = std::min(kKeyTile, T - j0);
    src.tile(kt, k + j0 * row, row, tile_len, hd);
    src.tile(vt, v + j0 * row, row, tile_len, hd);
    src.rows(kr, ld, k + j0 * row, row, tile_len, hd);
    for (int64_t i0 = j0; i0 < T; i0 += kQueryBlock) {
      const int64_t nq = std::min(kQueryBlock, T - i0);
      const Visibility vis{i0 + 1 - j0, tile_len};
      bk.scores(buf.probs, qh + i0 * hp, hp, nq, kt, hd, scale, vis);
      bk.scores(buf.dscores, dh + i0 * hp, hp, nq, vt, hd, 1.0f, vis);
      kern.softmax_backward(buf.probs, buf.dscores, lse_h + i0, buf.delta + i0, nq, scale, vis);
      bk.pack_weight_pairs(pp, buf.probs, nq, vis);
      bk.pack_weight_pairs(dsp, buf.dscores, nq, vis);
      bk.pack_weight_rows(dsr, buf.dscores, nq, vis);
      const bool overwrite_kv = hv.first_of_group && i0 == j0;
      bk.accumulate_columns(hv.dv + j0 * row, row, overwrite_kv, pp, nq, dr + i0 / 2 * ld, ld, hd,
                            vis);
      bk.accumulate_columns(hv.dk + j0 * row, row, overwrite_kv, dsp, nq, qr + i0 / 2 * ld, ld, hd,
                            vis);
      bk.accumulate_rows(hv.dq + i0 * row, row, nullptr, /*overwrite=*/j0 == 0, dsr, nq, kr, ld, hd,
                         vis);
    }
  }
}

template <class Src>
void backward_bf16_with(AttentionIsa isa, float* dqkv, const float* dout, const Src* qkv,
                        const float* out, const float* lse, int64_t B, int64_t T, int64_t C,
                        int64_t H, int64_t Hkv) {
  const Kernels& kern = kernels_for(isa);
  const attention_tiles::Bf16Kernels& bk = bf16_kernels_for(isa);
  const QkvLayout lay(C, H, Hkv);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t h = g * lay.group; h < (g + 1) * lay.group; ++h)
        backward_head_bf16(kern, bk, backward_head(dqkv, dout, qkv, out, lse, b, h, T, lay, H), T,
                           lay);
    }
  }
}

}  // namespace

void attention_forward_bf16_with(AttentionIsa isa, float* out, float* lse, const float* qkv,
                                 int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv) {
  const Kernels& kern = kernels_for(isa);
  const attention_tiles::Bf16Kernels& bk = bf16_kernels_for(isa);
  const QkvLayout lay(C, H, Hkv);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* base = qkv + b * T * lay.row;
      attend_head_bf16(kern, bk, out + b * T * C + h * lay.hd, C, lse + (b * H + h) * T,
                       base + lay.q(h), base + lay.k(h), base + lay.v(h), lay.row, T, lay.hd);
    }
  }
}

void attention_backward_bf16_with(AttentionIsa isa, float* dqkv, const float* dout,
                                  const float* qkv, const float* out, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t H, int64_t Hkv) {
  backward_bf16_with(isa, dqkv, dout, qkv, out, lse, B, T, C, H, Hkv);
}

void attention_backward_bf16_with(AttentionIsa isa, float* dqkv, const float* dout,
                                  const bf16_t* qkv, const float* out, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t H, int64_t Hkv) {
  backward_bf16_with(isa, dqkv, dout, qkv, out, lse, B, T, C, H, Hkv);
}

void attention_forward_with(AttentionIsa isa, float* out, float* lse, const float* qkv, int64_t B,
                            int64_t T, int64_t C, int64_t H, int64_t Hkv) {
  const Kernels& kern = kernels_for(isa);
  const QkvLayout lay(C, H, Hkv);
  const int64_t row = lay.row;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* base = qkv + b * T * row;
      for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
        attend_query_block(kern, out + (b * T + i0) * C + h * lay.hd, C, lse + (b * H + h) * T + i0,
                           base + lay.q(h) + i0 * row, row, std::min(kQueryBlock, T - i0), i0,
                           base + lay.k(h), base + lay.v(h), row, lay.hd);
      }
    }
  }
}

void attention_backward_with(AttentionIsa isa, float* dqkv, const float* dout, const float* qkv,
                             const float* out, const float* lse, int64_t B, int64_t T, int64_t C,
                             int64_t H, int64_t Hkv) {
  const Kernels& kern = kernels_for(isa);
  const QkvLayout lay(C, H, Hkv);
  // One iteration per key/value head: its query heads write its dk and dv, in order.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t h = g * lay.group; h < (g + 1) * lay.group; ++h)
        backward_one_head(kern, backward_head(dqkv, dout, qkv, out, lse, b, h, T, lay, H), T, lay);
    }
  }
}

void attention_decode_with(AttentionIsa isa, float* out, const float* q, const float* k_cache,
                           const float* v_cache, int64_t B, int64_t Tmax, int64_t len, int64_t C,
                           int64_t H, int64_t Hkv) {
  const Kernels& kern = kernels_for(isa);
  const QkvLayout lay(C, H, Hkv);
  const int64_t hd = lay.hd;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t cache = b * Tmax * lay.Ckv + h / lay.group * hd;
      attend_query_block(kern, out + b * C + h * hd, C, nullptr, q + b * C + h * hd, C, 1, len - 1,
                         k_cache + cache, v_cache + cache, lay.Ckv, hd);
    }
  }
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv) {
  attention_forward_with(best_isa(), out, lse, qkv, B, T, C, H, Hkv);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv) {
  attention_backward_with(best_isa(), dqkv, dout, qkv, out, lse, B, T, C, H, Hkv);
}

std::string_view attention_bf16_products() {
  switch (best_isa()) {
    case AttentionIsa::kAvx512Bf16:
      return "vdpbf16ps";
    case AttentionIsa::kAvx512Fma:
      return "fma";
    default:
      return "generic";
  }
}

void attention_forward_bf16(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                            int64_t C, int64_t H, int64_t Hkv) {
  attention_forward_bf16_with(best_isa(), out, lse, qkv, B, T, C, H, Hkv);
}

void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                             int64_t Hkv) {
  attention_backward_bf16_with(best_isa(), dqkv, dout, qkv, out, lse, B, T, C, H, Hkv);
}

void attention_backward_bf16(float* dqkv, const float* dout, const bf16_t* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                             int64_t Hkv) {
  attention_backward_bf16_with(best_isa(), dqkv, dout, qkv, out, lse, B, T, C, H, Hkv);
}

void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv) {
  attention_decode_with(best_isa(), out, q, k_cache, v_cache, B, Tmax, len, C, H, Hkv);
}

}  // namespace fp8lm::cpu
