// Flash-style causal attention on BF16 tensor cores (WMMA m16n16k16, FP32 accumulators, sm_80+):
// no T x T matrix, scores recomputed per tile, deterministic (no atomics).
//
// Tiling. Inputs are first moved to head-major BF16 [B*H, t_pad, HD] with t_pad = T rounded up
// to 64 and zero padding rows (attention_layout.h), so every tile load is a plain copy. A block
// is 4 warps and owns 64 consecutive rows of one head; warp w owns rows 16w..16w+15 of them,
// and every product a warp makes is 16 rows by 64 columns (4 fragments) or 16 rows by HD.
//   forward    block = 64 queries [q0, q0+64); loops over key tiles j0 = 0, 64, .., q0 (tiles
//              past the diagonal are causally invisible and skipped). Per tile: K, V -> shared;
//              S_w = Q_w·Kᵀ (Q_w in registers); online softmax on S_w (rows: running max m and
//              sum l in FP32; P_w = exp(scale*S_w - m_new) in BF16; the output rows rescaled
//              by exp(m_old - m_new), through shared memory when some row's max grew);
//              O_w += P_w·V in FP32 accumulators. At the end out = O_w / l, lse = m + log(l).
//   backward   D = rowsum(dO * O) first (row_dots). Then two kernels, both recomputing
//              P = exp(scale*S - lse) and dS = P * (dP - D) per tile:
//     dK, dV   block = 64 keys [j0, j0+64) and 8 warps in pairs: for each 16 keys a K warp,
//              which keeps their K rows in registers for the whole kernel and accumulates
//              dK, and a V warp with their V rows accumulating dV (one accumulator set per
//              warp, not two: no register spills at head size 128; K and V read once).
//              Loops over query tiles i0 = j0, .., t_pad-64 (earlier queries see none of the
//              keys). Per tile: Q, dO -> shared; the K warp makes Sᵀ = K·Qᵀ and the V warp
//              dPᵀ = V·dOᵀ (16 keys x 64 queries each); the pair turns half of the rows each
//              into Pᵀ and dSᵀ; then dK += dSᵀ·Q and dV += Pᵀ·dO in registers; dK scaled at
//              the end.
//     dQ       block = 64 queries and 8 warps in pairs, key tiles as in forward: per 16
//              queries a Q warp (their Q rows in registers) makes S = Q·Kᵀ and a dO warp (dO
//              rows) dP = dO·Vᵀ; half the rows of dS each; then dQ += dS·K, the Q warp
//              accumulating the first half of dQ's columns and the dO warp the rest (no
//              warp holds two operands' rows and all of dQ: no spills up to 256); scaled at
//              the end.
// Masking: key j is visible to query i iff j <= i. Because tiles are 64-aligned on both axes,
// every processed tile holds key j0 <= q0 <= i, so each row sees at least one key in every
// tile of the forward loop and its running max is finite from the first tile on. Padding keys
// (j >= T) are only ever seen by padding queries (i >= T), which are never stored; the backward
// masks padding queries too (i < T), so they add nothing to dK and dV.
//
// Shared-memory rows are padded (HD+8 BF16, 64+4 FP32, 64+8 BF16) so that fragment loads of
// consecutive rows fall in different banks; every fragment pointer stays 32-byte aligned as
// WMMA requires, and leading dimensions are multiples of 16 bytes.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "fp8lm/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_layout.h"
#include "kernels/cuda/cuda_check.h"

namespace fp8lm::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using attention_detail::at;
using attention_detail::Carve;
using attention_detail::round_up;

constexpr int kRows = 64;  // queries (forward, dQ) or keys (dK/dV) per block
constexpr int kTile = 64;  // keys (forward, dQ) or queries (dK/dV) per loop step
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// The backward kernels: two warps per 16 rows (dK/dV: a K and a V warp; dQ: a Q and a dO warp).
constexpr int kPairThreads = 2 * kThreads;
constexpr int kWarpRows = 16;    // one fragment of rows per warp
constexpr int kLdS = kTile + 4;  // FP32 score rows in shared memory
constexpr int kLdP = kTile + 8;  // BF16 probability rows in shared memory
static_assert(kRows == kTile, "causal tile skipping assumes square tiles on one grid");
static_assert(kRows == kWarps * kWarpRows, "each warp owns one fragment of rows");
constexpr unsigned kFullMask = 0xffffffffu;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
// A row-major tile read as column-major is its transpose: how K and V enter S = Q·Kᵀ.
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int HD>
struct Geometry {
  static constexpr int kLdT = HD + 8;  // BF16 rows of a Q, K, V or dO tile
  static constexpr int kLdO = HD + 4;  // FP32 output rows (forward)
  // Region sizes are multiples of 128 bytes, so every region starts aligned.
  static constexpr size_t kTileBytes = size_t{kTile} * kLdT * sizeof(bf16);
  static constexpr size_t kScoreBytes = size_t{kRows} * kLdS * sizeof(float);
  static constexpr size_t kProbBytes = size_t{kRows} * kLdP * sizeof(bf16);
  static constexpr size_t kOutBytes = size_t{kRows} * kLdO * sizeof(float);
  static constexpr size_t kRowStatBytes = size_t{kTile} * sizeof(float);
  // K, V | S | P | O
  static constexpr size_t kForwardBytes = 2 * kTileBytes + kScoreBytes + kProbBytes + kOutBytes;
  // Q, dO | Sᵀ, dPᵀ | Pᵀ, dSᵀ | lse, D of the query tile
  static constexpr size_t kDkDvBytes =
      2 * kTileBytes + 2 * kScoreBytes + 2 * kProbBytes + 2 * kRowStatBytes;
  // K, V | S, dP | dS
  static constexpr size_t kDqBytes = 2 * kTileBytes + 2 * kScoreBytes + kProbBytes;
  static_assert(HD % 16 == 0 && HD >= 16 && HD <= 256, "head size: a multiple of 16 up to 256");
  static_assert(kTileBytes % 128 == 0 && kScoreBytes % 128 == 0 && kProbBytes % 128 == 0 &&
                    kOutBytes % 128 == 0,
                "regions must keep 128-byte alignment");
};

// Head sizes up to 128 fit the smallest per-block opt-in shared memory among the GPUs built for
// (sm_86 and sm_89: 99 KiB); up to 256 they need sm_80's 163 KiB (sm_90 has 227), which
// flash_attention_head_size() asks the device for, so consumer GPUs take the plain path there.
constexpr size_t kEveryGpuSharedBytes = 99 * 1024;
constexpr size_t kDatacenterSharedBytes = 163 * 1024;
template <int HD>
constexpr size_t kMostSharedBytes = std::max({Geometry<HD>::kForwardBytes, Geometry<HD>::kDkDvBytes,
                                              Geometry<HD>::kDqBytes});
static_assert(kMostSharedBytes<128> <= kEveryGpuSharedBytes, "head size 128: tiles too large");
static_assert(kMostSharedBytes<256> <= kDatacenterSharedBytes, "head size 256: tiles too large");

// 64 rows of HD BF16, contiguous in global memory, into a padded shared tile; 16 bytes a thread
// per step, by the block's `threads` threads.
template <int HD, int threads = kThreads>
__device__ void load_tile(bf16* dst, const bf16* src) {
  constexpr int kChunks = HD / 8;
  for (int c = threadIdx.x; c < kTile * kChunks; c += threads) {
    const int r = c / kChunks;
    const int col = c % kChunks * 8;
    *reinterpret_cast<uint4*>(dst + r * Geometry<HD>::kLdT + col) =
        *reinterpret_cast<const uint4*>(src + r * HD + col);
  }
}

// A warp's 16 rows of HD (row-major, rows HD apart in global memory) as A fragments.
template <int HD>
__device__ void load_rows(FragA (&a)[HD / 16], const bf16* src) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) wmma::load_matrix_sync(a[kk], src + kk * 16, HD);
}

// out[16 x 64] (FP32, rows kLdS apart) = a[16 x HD] · tileᵀ, tile = 64 rows of HD in shared
// memory: out[r][c] = sum_d a[r][d] * tile[c][d].
template <int HD>
__device__ void product_with_transposed_tile(float* out, const FragA (&a)[HD / 16],
                                             const bf16* tile) {
  constexpr int kLdT = Geometry<HD>::kLdT;
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      FragBCol b;  // element (k, c) = tile[n*16 + c][kk*16 + k]
      wmma::load_matrix_sync(b, tile + n * 16 * kLdT + kk * 16, kLdT);
      wmma::mma_sync(acc, a[kk], b, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kLdS, wmma::mem_row_major);
  }
}

// acc[16 x 16*count] += a[16 x 64] · tile[64 x 16*count], count <= NC; a is BF16 in shared
// memory (rows kLdP apart), the tile 64 rows of HD in shared memory, from the column it points
// at; acc[n] holds columns n*16..n*16+15 of those.
template <int HD, int NC>
__device__ void accumulate_tile_columns(FragAcc (&acc)[NC], const bf16* a, const bf16* tile,
                                        int count) {
  constexpr int kLdT = Geometry<HD>::kLdT;
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + kk * 16, kLdP);
#pragma unroll
    for (int n = 0; n < NC; ++n) {
      if (n >= count) break;  // n stays a constant index: acc stays in registers
      FragBRow b;             // element (k, c) = tile[kk*16 + k][n*16 + c]
      wmma::load_matrix_sync(b, tile + kk * 16 * kLdT + n * 16, kLdT);
      wmma::mma_sync(acc[n], fa, b, acc[n]);
    }
  }
}

// All HD columns: acc[16 x HD] += a[16 x 64] · tile[64 x HD].
template <int HD>
__device__ void accumulate_tile_product(FragAcc (&acc)[HD / 16], const bf16* a, const bf16* tile) {
  accumulate_tile_columns<HD, HD / 16>(acc, a, tile, HD / 16);
}

// A warp's 16 x HD accumulators into FP32 shared-memory rows kLdO apart.
template <int HD>
__device__ void store_rows(float* dst, const FragAcc (&acc)[HD / 16]) {
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) {
    wmma::store_matrix_sync(dst + n * 16, acc[n], Geometry<HD>::kLdO, wmma::mem_row_major);
  }
}

// The first `count` fragments of a warp's 16 rows times scale, into rows HD apart from dst.
template <int HD, int NC>
__device__ void scale_and_store(float* dst, FragAcc (&acc)[NC], float scale, int count = NC) {
#pragma unroll
  for (int n = 0; n < NC; ++n) {
    if (n >= count) break;
    // A uniform factor may be applied element by element whatever the fragment's layout.
    for (int e = 0; e < acc[n].num_elements; ++e) acc[n].x[e] *= scale;
    wmma::store_matrix_sync(dst + n * 16, acc[n], HD, wmma::mem_row_major);
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int T,
                   int t_pad, int H, float scale) {
  using G = Geometry<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* at_ = smem;  // each region starts where the previous one ends
  bf16* sK = reinterpret_cast<bf16*>(at_);
  bf16* sV = reinterpret_cast<bf16*>(at_ += G::kTileBytes);
  float* sS = reinterpret_cast<float*>(at_ += G::kTileBytes);
  bf16* sP = reinterpret_cast<bf16*>(at_ += G::kScoreBytes);
  float* sO = reinterpret_cast<float*>(at_ += G::kProbBytes);

  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t bh = blockIdx.x;
  const int qb = static_cast<int>(gridDim.y - 1 - blockIdx.y);  // longest rows launch first
  const int row0 = qb * kRows + warp * kWarpRows;               // the warp's first query
  const int64_t head = bh * t_pad * HD;
  float* sS_w = sS + warp * kWarpRows * kLdS;
  bf16* sP_w = sP + warp * kWarpRows * kLdP;
  float* sO_w = sO + warp * kWarpRows * G::kLdO;

  FragA qf[HD / 16];
  load_rows<HD>(qf, q + head + int64_t{row0} * HD);
  FragAcc o_acc[HD / 16];  // the warp's 16 output rows, unnormalized
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(o_acc[n], 0.0f);

  // Softmax layout: lanes 2r and 2r+1 share row r of the warp's 16, taking the even and the
  // odd columns of each tile and halves of the output row; both hold the row's statistics.
  const int r = lane / 2;
  const int half = lane % 2;
  const int i = row0 + r;
  float row_max = -INFINITY;  // of scale * scores seen so far
  float row_sum = 0.0f;       // of exp(scale * score - row_max)

  for (int kt = 0; kt <= qb; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous K and V
    load_tile<HD>(sK, k + head + int64_t{j0} * HD);
    load_tile<HD>(sV, v + head + int64_t{j0} * HD);
    __syncthreads();

    product_with_transposed_tile<HD>(sS_w, qf, sK);
    __syncwarp();

    const float* s = sS_w + r * kLdS;
    float tile_max = -INFINITY;
    for (int c = half; c < kTile; c += 2) {
      if (j0 + c <= i) tile_max = fmaxf(tile_max, s[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    // scale > 0 and rounding is monotonic, so scale * max(s) is exactly max(scale * s); finite
    // because key j0 <= i is in the tile.
    const float new_max = fmaxf(row_max, tile_max * scale);
    float tile_sum = 0.0f;
    bf16* p = sP_w + r * kLdP;
    for (int c = half; c < kTile; c += 2) {
      const float pc = j0 + c <= i ? expf(s[c] * scale - new_max) : 0.0f;
      tile_sum += pc;
      p[c] = __float2bfloat16_rn(pc);
    }
    tile_sum += __shfl_xor_sync(kFullMask, tile_sum, 1);
    const float alpha = expf(row_max - new_max);  // 0 on the first tile (row_max = -inf)
    row_sum = row_sum * alpha + tile_sum;
    row_max = new_max;
    // Rows whose maximum grew rescale their output by alpha < 1. Which fragment element holds
    // which row is opaque, so the rows take a trip through shared memory, and only when some
    // row of the warp needs it (alpha == 1 leaves a row as it is; before the first tile the
    // output is still zero).
    if (kt > 0 && __any_sync(kFullMask, alpha != 1.0f)) {
      store_rows<HD>(sO_w, o_acc);
      __syncwarp();
      float* o = sO_w + r * G::kLdO;
      for (int d = half; d < HD; d += 2) o[d] *= alpha;
      __syncwarp();
#pragma unroll
      for (int n = 0; n < HD / 16; ++n) {
        wmma::load_matrix_sync(o_acc[n], sO_w + n * 16, G::kLdO, wmma::mem_row_major);
      }
    }
    __syncwarp();  // every lane's P row is in place
    accumulate_tile_product<HD>(o_acc, sP_w, sV);
  }
  store_rows<HD>(sO_w, o_acc);
  __syncwarp();

  // Row by row, so that the warp writes each output row in one contiguous run.
  const int64_t b = bh / H;
  const int64_t h = bh % H;
  for (int rr = 0; rr < kWarpRows; ++rr) {
    const float sum = __shfl_sync(kFullMask, row_sum, 2 * rr);
    const float max = __shfl_sync(kFullMask, row_max, 2 * rr);
    const int64_t query = row0 + rr;
    if (query >= T) break;  // padding rows, the same for the whole warp
    const float inv_sum = 1.0f / sum;
    float* dst = out + (b * T + query) * (int64_t{H} * HD) + h * HD;
    const float* o = sO_w + rr * G::kLdO;
    for (int d = lane; d < HD; d += 32) dst[d] = o[d] * inv_sum;
    if (lane == 0) lse[bh * T + query] = max + logf(sum);
  }
}

template <int HD>
__global__ void __launch_bounds__(kPairThreads)
    backward_dkdv_kernel(float* dk, float* dv, const bf16* q, const bf16* k, const bf16* v,
                         const bf16* dout, const float* lse, const float* D, int T, int t_pad,
                         float scale) {
  using G = Geometry<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* at_ = smem;
  bf16* sQ = reinterpret_cast<bf16*>(at_);
  bf16* sdO = reinterpret_cast<bf16*>(at_ += G::kTileBytes);
  float* sS = reinterpret_cast<float*>(at_ += G::kTileBytes);
  float* sdP = reinterpret_cast<float*>(at_ += G::kScoreBytes);
  bf16* sP = reinterpret_cast<bf16*>(at_ += G::kScoreBytes);
  bf16* sdS = reinterpret_cast<bf16*>(at_ += G::kProbBytes);
  float* sLse = reinterpret_cast<float*>(at_ += G::kProbBytes);
  float* sD = reinterpret_cast<float*>(at_ += G::kRowStatBytes);

  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int slab = warp % kWarps;     // the pair's 16 keys
  const bool k_warp = warp < kWarps;  // else the V warp
  const int64_t bh = blockIdx.x;
  const int kb = static_cast<int>(blockIdx.y);     // the first keys meet the most queries
  const int key0 = kb * kRows + slab * kWarpRows;  // the pair's first key
  const int64_t head = bh * t_pad * HD;
  float* sS_w = sS + slab * kWarpRows * kLdS;  // Sᵀ: row = key, column = query
  float* sdP_w = sdP + slab * kWarpRows * kLdS;
  bf16* sP_w = sP + slab * kWarpRows * kLdP;
  bf16* sdS_w = sdS + slab * kWarpRows * kLdP;

  FragAcc acc[HD / 16];  // the K warp's dK rows, the V warp's dV rows
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  FragA rows[HD / 16];  // the K warp's K rows, the V warp's V rows: read once
  load_rows<HD>(rows, (k_warp ? k : v) + head + int64_t{key0} * HD);

  for (int qt = kb; qt < t_pad / kTile; ++qt) {
    const int i0 = qt * kTile;
    __syncthreads();  // every warp is done with the previous Q, dO, lse, D, P and dS
    load_tile<HD, kPairThreads>(sQ, q + head + int64_t{i0} * HD);
    load_tile<HD, kPairThreads>(sdO, dout + head + int64_t{i0} * HD);
    for (int c = threadIdx.x; c < kTile; c += kPairThreads) {
      sLse[c] = i0 + c < T ? lse[bh * T + i0 + c] : 0.0f;
      sD[c] = D[bh * t_pad + i0 + c];
    }
    __syncthreads();

    if (k_warp) {
      product_with_transposed_tile<HD>(sS_w, rows, sQ);  // Sᵀ = K·Qᵀ
    } else {
      product_with_transposed_tile<HD>(sdP_w, rows, sdO);  // dPᵀ = V·dOᵀ
    }
    __syncthreads();  // the pair's Sᵀ and dPᵀ are both in shared memory

    // The K warp takes the first 8 of the pair's rows, the V warp the other 8.
    for (int r = k_warp ? 0 : kWarpRows / 2; r < (k_warp ? kWarpRows / 2 : kWarpRows); ++r) {
      const int j = key0 + r;
      for (int c = lane; c < kTile; c += 32) {
        const int i = i0 + c;
        float p = 0.0f, ds = 0.0f;
        if (j <= i && i < T) {
          p = expf(sS_w[r * kLdS + c] * scale - sLse[c]);
          ds = p * (sdP_w[r * kLdS + c] - sD[c]);
        }
        sP_w[r * kLdP + c] = __float2bfloat16_rn(p);
        sdS_w[r * kLdP + c] = __float2bfloat16_rn(ds);
      }
    }
    __syncthreads();  // the pair's Pᵀ and dSᵀ are whole

    if (k_warp) {
      accumulate_tile_product<HD>(acc, sdS_w, sQ);  // dK += dSᵀ · Q
    } else {
      accumulate_tile_product<HD>(acc, sP_w, sdO);  // dV += Pᵀ · dO
    }
  }

  if (k_warp) {
    scale_and_store<HD>(dk + head + int64_t{key0} * HD, acc, scale);
  } else {
    scale_and_store<HD>(dv + head + int64_t{key0} * HD, acc, 1.0f);
  }
}

template <int HD>
__global__ void __launch_bounds__(kPairThreads)
    backward_dq_kernel(float* dq, const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                       const float* lse, const float* D, int T, int t_pad, float scale) {
  using G = Geometry<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* at_ = smem;
  bf16* sK = reinterpret_cast<bf16*>(at_);
  bf16* sV = reinterpret_cast<bf16*>(at_ += G::kTileBytes);
  float* sS = reinterpret_cast<float*>(at_ += G::kTileBytes);
  float* sdP = reinterpret_cast<float*>(at_ += G::kScoreBytes);
  bf16* sdS = reinterpret_cast<bf16*>(at_ += G::kScoreBytes);

  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int slab = warp % kWarps;     // the pair's 16 queries
  const bool q_warp = warp < kWarps;  // else the dO warp
  const int64_t bh = blockIdx.x;
  const int qb = static_cast<int>(gridDim.y - 1 - blockIdx.y);  // longest rows launch first
  const int row0 = qb * kRows + slab * kWarpRows;
  const int64_t head = bh * t_pad * HD;
  float* sS_w = sS + slab * kWarpRows * kLdS;
  float* sdP_w = sdP + slab * kWarpRows * kLdS;
  bf16* sdS_w = sdS + slab * kWarpRows * kLdP;

  FragA rows[HD / 16];  // the Q warp's Q rows, the dO warp's dO rows
  load_rows<HD>(rows, (q_warp ? q : dout) + head + int64_t{row0} * HD);
  // Lane r and r + 16 hold row r's lse and D; the row loop broadcasts them.
  const int lane_row = row0 + lane % kWarpRows;
  const float lane_lse = lane_row < T ? lse[bh * T + lane_row] : 0.0f;
  const float lane_D = D[bh * t_pad + lane_row];

  // dQ's column fragments: the Q warp's first half (rounded up), the dO warp's the rest.
  constexpr int kHalf = (HD / 16 + 1) / 2;
  const int col_frag0 = q_warp ? 0 : kHalf;
  const int col_frags = q_warp ? kHalf : HD / 16 - kHalf;
  FragAcc acc[kHalf];
#pragma unroll
  for (int n = 0; n < kHalf; ++n) wmma::fill_fragment(acc[n], 0.0f);

  for (int kt = 0; kt <= qb; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous K, V and dS
    load_tile<HD, kPairThreads>(sK, k + head + int64_t{j0} * HD);
    load_tile<HD, kPairThreads>(sV, v + head + int64_t{j0} * HD);
    __syncthreads();

    if (q_warp) {
      product_with_transposed_tile<HD>(sS_w, rows, sK);  // S = Q·Kᵀ
    } else {
      product_with_transposed_tile<HD>(sdP_w, rows, sV);  // dP = dO·Vᵀ
    }
    __syncthreads();  // the pair's S and dP are both in shared memory

    // The Q warp takes the first 8 of the pair's rows, the dO warp the other 8.
    for (int r = q_warp ? 0 : kWarpRows / 2; r < (q_warp ? kWarpRows / 2 : kWarpRows); ++r) {
      const int i = row0 + r;
      const float lse_i = __shfl_sync(kFullMask, lane_lse, r);
      const float D_i = __shfl_sync(kFullMask, lane_D, r);
      for (int c = lane; c < kTile; c += 32) {
        const int j = j0 + c;
        float ds = 0.0f;
        if (j <= i && i < T) {
          const float p = expf(sS_w[r * kLdS + c] * scale - lse_i);
          ds = p * (sdP_w[r * kLdS + c] - D_i);
        }
        sdS_w[r * kLdP + c] = __float2bfloat16_rn(ds);
      }
    }
    __syncthreads();  // the pair's dS is whole

    // dQ += dS · K, this warp's columns.
    accumulate_tile_columns<HD, kHalf>(acc, sdS_w, sK + col_frag0 * 16, col_frags);
  }

  scale_and_store<HD>(dq + head + int64_t{row0} * HD + col_frag0 * 16, acc, scale, col_frags);
}

// The head sizes with kernels: every multiple of 16 up to 128, and the common larger ones up to
// 256 (issue 34: those took the plain path, whose T x T scores do not fit at long contexts). A
// runtime head size becomes the template argument here, in one place; false where there is no
// kernel.
using HeadDims = std::integer_sequence<int, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256>;

template <typename F, int... HDs>
bool with_head_dim(int64_t hd, F&& f, std::integer_sequence<int, HDs...>) {
  return ((hd == HDs ? (f(std::integral_constant<int, HDs>{}), true) : false) || ...);
}

template <typename F>
bool with_head_dim(int64_t hd, F&& f) {
  return with_head_dim(hd, f, HeadDims{});
}

}  // namespace

bool flash_attention_head_size(int64_t hd) {
  size_t needed = 0;
  if (!with_head_dim(hd, [&](auto head_dim) { needed = kMostSharedBytes<head_dim.value>; }))
    return false;
  if (needed <= kEveryGpuSharedBytes) return true;
  int device = 0, optin = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&device));
  FP8LM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return needed <= static_cast<size_t>(optin);
}

namespace {

template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes) {
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

attention_detail::Workspace& workspace() {
  static attention_detail::Workspace w;
  return w;
}

// Blocks along y are 64-row blocks of one head: at most 65535 of them.
dim3 grid_for(int64_t B, int64_t H, int64_t T, int64_t t_pad) {
  const int64_t row_blocks = t_pad / kRows;
  if (row_blocks > 65535 || B * H > 0x7fffffff) {
    throw Error("attention: B*H = " + std::to_string(B * H) + ", T = " + std::to_string(T) +
                " exceed the flash kernels' grid (B*H < 2^31, T <= 65535*64)");
  }
  return dim3(static_cast<unsigned>(B * H), static_cast<unsigned>(row_blocks));
}

}  // namespace

// Head sizes without flash kernels on this device (flash_attention_head_size) take the plain
// path.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv, cudaStream_t stream) {
  const QkvLayout lay(C, H, Hkv);
  const int64_t hd = lay.hd;
  if (!flash_attention_head_size(hd))
    return plain::attention_forward(out, lse, qkv, B, T, C, H, Hkv, stream);
  if (B == 0 || T == 0) return;
  const int64_t t_pad = round_up(T, kRows);
  const int64_t n = B * H * t_pad * hd;
  Carve carve;
  const size_t q_at = carve.add<bf16_t>(n);
  const size_t k_at = carve.add<bf16_t>(n);
  const size_t v_at = carve.add<bf16_t>(n);
  void* base = workspace().get(carve.size());
  bf16_t* parts[3] = {at<bf16_t>(base, q_at), at<bf16_t>(base, k_at), at<bf16_t>(base, v_at)};
  attention_detail::split_qkv(parts, qkv, lay, B, T, H, t_pad, hd, stream);
  const dim3 grid = grid_for(B, H, T, t_pad);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  with_head_dim(hd, [&](auto head_dim) {
    constexpr int HD = decltype(head_dim)::value;
    constexpr size_t bytes = Geometry<HD>::kForwardBytes;
    allow_shared_bytes(forward_kernel<HD>, bytes);
    forward_kernel<HD><<<grid, kThreads, bytes, stream>>>(
        out, lse, reinterpret_cast<const bf16*>(parts[0]), reinterpret_cast<const bf16*>(parts[1]),
        reinterpret_cast<const bf16*>(parts[2]), static_cast<int>(T), static_cast<int>(t_pad),
        static_cast<int>(H), scale);
    FP8LM_CUDA_CHECK_LAUNCH();
  });
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv,
                        cudaStream_t stream) {
  const QkvLayout lay(C, H, Hkv);
  const int64_t hd = lay.hd;
  if (!flash_attention_head_size(hd)) {
    return plain::attention_backward(dqkv, dout, qkv, out, lse, B, T, C, H, Hkv, stream);
  }
  if (B == 0 || T == 0) return;
  const int64_t t_pad = round_up(T, kRows);
  const int64_t n = B * H * t_pad * hd;
  Carve carve;
  const size_t q_at = carve.add<bf16_t>(n);
  const size_t k_at = carve.add<bf16_t>(n);
  const size_t v_at = carve.add<bf16_t>(n);
  const size_t do_at = carve.add<bf16_t>(n);
  const size_t delta_at = carve.add<float>(B * H * t_pad);
  const size_t dq_at = carve.add<float>(n);
  const size_t dk_at = carve.add<float>(n);
  const size_t dv_at = carve.add<float>(n);
  void* base = workspace().get(carve.size());
  bf16_t* parts[3] = {at<bf16_t>(base, q_at), at<bf16_t>(base, k_at), at<bf16_t>(base, v_at)};
  bf16_t* dO = at<bf16_t>(base, do_at);
  float* delta = at<float>(base, delta_at);
  float* grads[3] = {at<float>(base, dq_at), at<float>(base, dk_at), at<float>(base, dv_at)};

  attention_detail::split_qkv(parts, qkv, lay, B, T, H, t_pad, hd, stream);
  attention_detail::split_heads(dO, dout, C, 0, B, T, H, hd, t_pad, hd, stream);
  attention_detail::row_dots(delta, dout, out, B, T, H, hd, t_pad, stream);

  const dim3 grid = grid_for(B, H, T, t_pad);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const auto* q = reinterpret_cast<const bf16*>(parts[0]);
  const auto* k = reinterpret_cast<const bf16*>(parts[1]);
  const auto* v = reinterpret_cast<const bf16*>(parts[2]);
  const auto* d_o = reinterpret_cast<const bf16*>(dO);
  const int t = static_cast<int>(T);
  const int tp = static_cast<int>(t_pad);
  with_head_dim(hd, [&](auto head_dim) {
    constexpr int HD = decltype(head_dim)::value;
    constexpr size_t dkdv_bytes = Geometry<HD>::kDkDvBytes;
    allow_shared_bytes(backward_dkdv_kernel<HD>, dkdv_bytes);
    backward_dkdv_kernel<HD><<<grid, kPairThreads, dkdv_bytes, stream>>>(
        grads[1], grads[2], q, k, v, d_o, lse, delta, t, tp, scale);
    FP8LM_CUDA_CHECK_LAUNCH();
    constexpr size_t dq_bytes = Geometry<HD>::kDqBytes;
    allow_shared_bytes(backward_dq_kernel<HD>, dq_bytes);
    backward_dq_kernel<HD><<<grid, kPairThreads, dq_bytes, stream>>>(grads[0], q, k, v, d_o, lse,
                                                                     delta, t, tp, scale);
    FP8LM_CUDA_CHECK_LAUNCH();
  });
  attention_detail::merge_qkv(dqkv, grads, lay, B, T, H, t_pad, hd, stream);
}

}  // namespace fp8lm::cuda
