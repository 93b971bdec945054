#pragma once
// The tile kernels behind attention.h, one set per instruction set, and entry points that take
// the set explicitly so tests can hold the two against each other. attention.cpp owns the loop
// over tiles; a kernel set only does arithmetic on one query block x key tile.
#include <cstdint>

#include "core/bf16.h"

namespace fp8lm::cpu {

namespace attention_tiles {

// Keys per tile, and the row stride of every [rows, kKeyTile] score buffer and of a transposed
// [hd, kKeyTile] key or value tile.
constexpr int64_t kKeyTile = 64;

// Which keys of a tile each query of a block sees: row r, the block's r-th consecutive query,
// sees the tile's first visible(r) = min(first + r, n) keys, with first >= 1 and n <= kKeyTile
// the tile's length. Causality makes the count grow by one per row until the whole tile is seen.
struct Visibility {
  int64_t first, n;
  int64_t visible(int64_t r) const { return first + r < n ? first + r : n; }
};

struct Kernels {
  // dst[d * kKeyTile + j] = rows[j * stride + d] for j < n, d < hd; columns n up to the next
  // multiple of 16 are zeroed, so kernels may read whole 16-key groups. Reads only the n rows.
  void (*transpose_tile)(float* dst, const float* rows, int64_t stride, int64_t n, int64_t hd);

  // dst_r = src_r, hd values, for r < n. Kernels stream a tile's rows many times over; in qkv
  // the rows lie 3C floats apart, for common widths a multiple of 1 KiB or more that maps them
  // all to a few L1 sets, where they evict each other. Copied, they don't.
  void (*copy_rows)(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                    int64_t hd);

  // s[r * kKeyTile + j] = scale * (x_r . column j of tile_t) for r < nq and at least every
  // visible j. x_r is x + r * x_stride; tile_t is a transposed tile. Other entries are garbage.
  void (*scores)(float* s, const float* x, int64_t x_stride, int64_t nq, const float* tile_t,
                 int64_t hd, float scale, Visibility vis);

  // Online-softmax step over one key tile, per row r of s: raises row_max[r] to the tile's
  // maximum, overwrites the visible scores with exp(score - row_max[r]), sets alpha[r] to
  // exp(old row_max[r] - new row_max[r]) and row_sum[r] to row_sum[r] * alpha[r] + the sum of
  // the new weights.
  void (*softmax_forward)(float* s, float* row_max, float* row_sum, float* alpha, int64_t nq,
                          Visibility vis);

  // out_r = acc_r / row_sum[r] and, unless lse is null, lse[r] = row_max[r] + log(row_sum[r]),
  // for r < nq; rows hd long.
  void (*finish_rows)(float* out, int64_t out_stride, float* lse, const float* acc,
                      int64_t acc_stride, const float* row_max, const float* row_sum, int64_t nq,
                      int64_t hd);

  // Per row r and visible j: p = exp(p - lse[r]) (p holds scores on entry) and
  // ds = p * (ds - delta[r]) * scale (ds holds dout_r . value_j on entry). Entries past the
  // visible ones, up to the tile's length rounded up to 16, become zero in both.
  void (*softmax_backward)(float* p, float* ds, const float* lse, const float* delta, int64_t nq,
                           float scale, Visibility vis);

  // y_r = alpha[r] * y_r + sum over visible j, in order, of p[r * kKeyTile + j] * x_j, for
  // r < nq; y_r is y + r * y_stride, x_j is x + j * x_stride, both hd long. alpha null means 1.
  // With overwrite, y_r starts from zero instead (and may hold anything, NaN included).
  void (*accumulate_rows)(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                          const float* p, int64_t nq, const float* x, int64_t x_stride, int64_t hd,
                          Visibility vis);

  // y_j += sum over r < nq, in order, of p[r * kKeyTile + j] * x_r, for j < vis.n; y_j is
  // y + j * y_stride. Weights of keys a row does not see must be zero (softmax_backward's), and
  // rows that see none of a key's group may be skipped. overwrite as for accumulate_rows.
  void (*accumulate_columns)(float* y, int64_t y_stride, bool overwrite, const float* p, int64_t nq,
                             const float* x, int64_t x_stride, int64_t hd, Visibility vis);

  // dots[i] = a_i . b_i over hd values, for i < n; rows strided by stride.
  void (*row_dots)(float* dots, const float* a, const float* b, int64_t stride, int64_t n,
                   int64_t hd);
};

// Plain C++, for any CPU.
const Kernels& generic_kernels();

// BF16 math (attention.h's *_bf16 entry points): operands rounded to BF16, products summed in
// FP32 two at a time as the CPU's BF16 dot-product instruction (VDPBF16PS) sums them, so one
// instruction does two FMAs' work. A pair is a uint32_t holding two BF16 values, the first in
// the low half; dot2 below is the arithmetic on one.
//
// Layouts (h = (hd + 1) / 2, ld = hd rounded up to 16):
//   half pairs  [n][h]: row r's pair i is (x_r[i], x_r[i + h]), zero past hd. Scores need
//               pairs along the head dimension; pairing i with i + h keeps every pack a
//               lane-wise operation on two vectors, no shuffles.
//   tile pairs  [h][kKeyTile]: half pairs of a tile's rows, transposed (key j in column j;
//               columns past the tile's length, up to the next multiple of 16, zero).
//   row pairs   [ceil(n / 2)][ld]: pair d of row pair m is (x_2m[d], x_2m+1[d]); a missing
//               odd row is zero. Weighted sums over rows (keys, or queries) take them.
//   weight rows [nq][kKeyTile / 2]: row r's pair m is (p[r][2m], p[r][2m+1]).
//   weight pairs [ceil(nq / 2)][kKeyTile]: pair j of row pair m is (p[2m][j], p[2m+1][j]).
inline int64_t half_pairs(int64_t hd) {
  return (hd + 1) / 2;  // h above
}

struct Bf16Kernels {
  void (*pack_half_pairs)(uint32_t* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                          int64_t n, int64_t hd);
  void (*pack_tile_pairs)(uint32_t* dst, const float* rows, int64_t stride, int64_t n, int64_t hd);
  void (*pack_row_pairs)(uint32_t* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                         int64_t n, int64_t hd);
  // The same three from BF16 values (q, k and v saved in BF16 for backward): the bits the FP32
  // packs give on the values widened, the rounding left out (the same flush and quiet NaN).
  void (*pack_half_pairs_bf16)(uint32_t* dst, int64_t dst_stride, const bf16_t* src,
                               int64_t src_stride, int64_t n, int64_t hd);
  void (*pack_tile_pairs_bf16)(uint32_t* dst, const bf16_t* rows, int64_t stride, int64_t n,
                               int64_t hd);
  void (*pack_row_pairs_bf16)(uint32_t* dst, int64_t dst_stride, const bf16_t* src,
                              int64_t src_stride, int64_t n, int64_t hd);
  // Weights (softmax's p or ds, [nq, kKeyTile] floats) into weight rows; row r's entries at and
  // past vis.visible(r) become zero, so the pair that straddles them adds nothing.
  void (*pack_weight_rows)(uint32_t* dst, const float* p, int64_t nq, Visibility vis);
  // Weights into weight pairs, columns up to vis.n rounded up to 16 (entries a row doesn't see
  // must already be zero, as softmax_backward leaves them).
  void (*pack_weight_pairs)(uint32_t* dst, const float* p, int64_t nq, Visibility vis);

  // s[r * kKeyTile + j] = scale * dot over the h pairs, in order, of x's row r (half pairs,
  // rows x_stride apart) and tile column j, for every visible j (others: garbage).
  void (*scores)(float* s, const uint32_t* x, int64_t x_stride, int64_t nq, const uint32_t* tile,
                 int64_t hd, float scale, Visibility vis);
  // y_r = alpha[r] * y_r (zero with overwrite) + the weighted sum over key pairs
  // m < ceil(vis.visible(r) / 2), in order, of weight row r's pair m and row pair m of x, for
  // r < nq; x's row pairs x_stride pairs apart. alpha null means 1.
  void (*accumulate_rows)(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                          const uint32_t* p, int64_t nq, const uint32_t* x, int64_t x_stride,
                          int64_t hd, Visibility vis);
  // y_j += the weighted sum over query pairs m from (j - vis.first + 1) / 2 (the first pair
  // holding a row that sees key j) to ceil(nq / 2), in order, of weight pair column j and row
  // pair m of x, for j < vis.n; overwrite as for accumulate_rows.
  void (*accumulate_columns)(float* y, int64_t y_stride, bool overwrite, const uint32_t* p,
                             int64_t nq, const uint32_t* x, int64_t x_stride, int64_t hd,
                             Visibility vis);
};

// acc + a.hi * b.hi, rounded to FP32, then + a.lo * b.lo, rounded (the products are exact):
// VDPBF16PS's order. Like it, BF16 inputs and results below FLT_MIN count as zero (the packs
// already flush the inputs), and so does an accumulator that comes in below it.
float dot2(float acc, uint32_t a, uint32_t b);

const Bf16Kernels& generic_bf16_kernels();

}  // namespace attention_tiles

namespace avx512 {
// AVX-512 F/BW/VL/DQ (attention_avx512.cpp); callers check the CPU first.
const attention_tiles::Kernels& attention_kernels();
// AVX-512 with AVX512-BF16 (attention_avx512_bf16.cpp): the generic BF16 set's bits.
const attention_tiles::Bf16Kernels& attention_bf16_kernels();
// AVX-512 F/BW/VL/DQ, the products on FMAs (attention_avx512_bf16_fma.cpp): the same bits.
const attention_tiles::Bf16Kernels& attention_bf16_fma_kernels();
}  // namespace avx512

// The FP32 kernel set, and for BF16 math which set makes the products: kAvx512 pairs the
// AVX-512 FP32 set (softmax and its statistics) with the generic BF16 set, kAvx512Fma with the
// FMA one and kAvx512Bf16 with the AVX512-BF16 one, so the three give the same bits. The CPU's
// own is kAvx512Bf16 where VDPBF16PS outruns FP32 FMAs (bf16_probe.h), else kAvx512Fma.
enum class AttentionIsa { kGeneric, kAvx512, kAvx512Fma, kAvx512Bf16 };

// attention.h's entry points with the kernel set forced instead of picked from cpu_features().
void attention_forward_with(AttentionIsa isa, float* out, float* lse, const float* qkv, int64_t B,
                            int64_t T, int64_t C, int64_t H, int64_t Hkv);
void attention_backward_with(AttentionIsa isa, float* dqkv, const float* dout, const float* qkv,
                             const float* out, const float* lse, int64_t B, int64_t T, int64_t C,
                             int64_t H, int64_t Hkv);
void attention_forward_bf16_with(AttentionIsa isa, float* out, float* lse, const float* qkv,
                                 int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv);
void attention_backward_bf16_with(AttentionIsa isa, float* dqkv, const float* dout,
                                  const float* qkv, const float* out, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t H, int64_t Hkv);
void attention_backward_bf16_with(AttentionIsa isa, float* dqkv, const float* dout,
                                  const bf16_t* qkv, const float* out, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t H, int64_t Hkv);
void attention_decode_with(AttentionIsa isa, float* out, const float* q, const float* k_cache,
                           const float* v_cache, int64_t B, int64_t Tmax, int64_t len, int64_t C,
                           int64_t H, int64_t Hkv);

}  // namespace fp8lm::cpu
