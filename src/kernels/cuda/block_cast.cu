// Block-scaled casts (block_cast.h): each scale block's amax, its scale by the recipe's rule
// and each value's code (the CPU's own, core/ and fp8/: one source for host and device) and
// the BF16 operand (block_rules.cuh). The rules (Fp8Rule, Nvfp4Rule) are written once; two
// kernels walk the blocks so that a warp's loads are coalesced:
//  - blocks along rows (1x16, 1x32, 1x128, 16x16, 128x128): a group of lanes per block (32, or
//    16 for blocks of at most 16 values, two blocks a warp), reading the block row by row, so
//    consecutive lanes read consecutive floats; the amax is a shuffle reduction in the group;
//  - blocks down columns (16x1, 32x1, 128x1): a thread per block; neighbouring threads own
//    neighbouring columns, so each row the warp reads is 32 consecutive floats.
// (Issue 34: the old kernel, a thread per block whatever its shape, read a 128x128 block's
// 16K values serially and a warp's lanes from 32 different blocks.)
// NVFP4 first takes the RHT (one thread per column of a group of 16 rows) and the tensor's
// amax, which its global scale needs.
// The amax is a maximum (fmaxf, NaN left out): the same whatever order the lanes take it in,
// so the bits are the CPU's.
#include <algorithm>

#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "fp8/hadamard.h"
#include "fp8/nvfp4_quantize.h"
#include "kernels/cuda/block_cast.h"
#include "kernels/cuda/block_rules.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/quantize.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond: enough to fill any GPU
// pair_kernel's transposed tile: rows of W + 4 bytes, so that the column threads' stores (a
// row each; at W = 128 a row is 33 words) fall in different banks.
constexpr int kTilePad = 4;
constexpr int64_t kMaxStagedTile = 128;

struct Blocks {
  int64_t rows, cols, block_rows, block_cols, grid_cols, count;
};

// Where a cast's codes go: row-major, or transposed ([cols, rows], BlockCastOut::codes_transposed);
// nowhere when null.
struct CodesOut {
  uint8_t* codes;
  bool transposed;
  int64_t rows, cols;
  __device__ void put(int64_t r, int64_t c, uint8_t code) const {
    if (codes) codes[transposed ? c * rows + r : r * cols + c] = code;
  }
};
CodesOut codes_out(const BlockGrid& g, const BlockCastOut& out) {
  return {out.codes, out.codes_transposed, g.rows, g.cols};
}

// Block b's rows [r0, r0 + nr) and columns [c0, c0 + nc).
struct BlockSpan {
  int64_t r0, c0, nr, nc;
};
__device__ inline BlockSpan block_span(const Blocks& g, int64_t b) {
  const int64_t r0 = b / g.grid_cols * g.block_rows, c0 = b % g.grid_cols * g.block_cols;
  return {r0, c0, g.rows - r0 < g.block_rows ? g.rows - r0 : g.block_rows,
          g.cols - c0 < g.block_cols ? g.cols - c0 : g.block_cols};
}

// The FP8 schemes: MXFP8 (E8M0 scales from max_norm_rcp) and Float8BlockScaling (FP32
// power-of-two scale_invs).
// A rule's value() writes the element's operand (where kept) and returns its code, which the
// kernel puts in place (CodesOut); decode_scale and operand_of are the operand's math, which
// block_decode_bf16 shares.
template <DType F, bool kMx>
struct Fp8Rule {
  void* scales;
  uint16_t* operand;
  float* tensor_scale_inv;
  BlockScalingParams params;

  // The rule writing a cast's outputs.
  static Fp8Rule of(const BlockCast& c, const BlockCastOut& out) {
    return {out.scales, out.operand, out.tensor_scale_inv, c.params};
  }

  struct Scale {
    float multiplier, decode;
  };
  __device__ void start() {
    if (global_thread() == 0) *tensor_scale_inv = 1.0f;
  }
  __device__ Scale block(int64_t b, float amax, bool write) const {
    if constexpr (kMx) {
      // max_norm_rcp: 1 / max rounded to FP32 once (a constant), then a product.
      constexpr auto max_rcp = static_cast<float>(1.0 / static_cast<double>(fp8_max(F)));
      const uint8_t s = e8m0_encode_round_up(amax * max_rcp);
      if (write) static_cast<uint8_t*>(scales)[b] = s;
      return {e8m0_reciprocal(s), e8m0_decode(s)};
    } else {
      const float multiplier = fp8_block_scale(amax, F, params);
      const float decode = 1.0f / multiplier;
      if (write) static_cast<float*>(scales)[b] = decode;
      return {multiplier, decode};
    }
  }
  __device__ uint8_t value(int64_t i, float x, const Scale& s) const {
    const uint8_t code = fp8_encode<F>(x * s.multiplier);
    if (operand) operand[i] = operand_of(code, s.decode);
    return code;
  }
  __device__ static float decode_scale(const void* scales, int64_t b) {
    if constexpr (kMx) return e8m0_decode(static_cast<const uint8_t*>(scales)[b]);
    return static_cast<const float*>(scales)[b];
  }
  __device__ static uint16_t operand_of(uint8_t code, float decode) {
    return fp8_times_pow2_bf16<F>(code, decode);
  }
};

// nvfp4_quantize's rule (fp8/nvfp4_quantize.cpp) per block: an E4M3 scale of the block amax
// times the global scale over 6, each value times the scale's reciprocal cast to E2M1 (nearest,
// or stochastically with the draw of its place in the tensor), the operand E2M1 x E4M3 (exact).
template <bool kStochastic>
struct Nvfp4Rule {
  uint8_t* scales;
  uint16_t* operand;
  float* tensor_scale_inv;
  const float* tensor_amax;
  uint32_t sr_key;
  float inv_global = 0.0f, k = 0.0f;  // start() sets them from the tensor's amax

  struct Scale {
    float multiplier, scale;
  };
  __device__ void start() {
    const float global = nvfp4_global_encode_scale(*tensor_amax);
    inv_global = __fdiv_rn(1.0f, global);
    k = __fmul_rn(global, 1.0f / 6.0f);
    if (global_thread() == 0) *tensor_scale_inv = inv_global;
  }
  __device__ Scale block(int64_t b, float amax, bool write) const {
    const uint8_t s = fp8_encode<DType::E4M3>(__fmul_rn(amax, k));
    if (write) scales[b] = s;
    const float scale = fp8_value<DType::E4M3>(s);  // never a NaN code: amax is not NaN
    float multiplier = __fdiv_rn(1.0f, __fmul_rn(scale, inv_global));
    if (!(multiplier < 0x1.fffffep127f)) multiplier = 0x1.fffffep127f;
    return {multiplier, scale};
  }
  __device__ uint8_t value(int64_t i, float x, const Scale& s) const {
    const float v = __fmul_rn(x, s.multiplier);
    const uint8_t code =
        kStochastic ? e2m1_encode_stochastic(v, counter_bits(sr_key, static_cast<uint32_t>(i)))
                    : e2m1_encode(v);
    if (operand) operand[i] = operand_of(code, s.scale);
    return code;
  }
  __device__ static float decode_scale(const void* scales, int64_t b) {
    return fp8_value<DType::E4M3>(static_cast<const uint8_t*>(scales)[b]);
  }
  __device__ static uint16_t operand_of(uint8_t code, float scale) {
    return bf16_from_float(__fmul_rn(e2m1_decode(code), scale));
  }
};

// Blocks down columns (block_cols == 1): a thread per block, neighbours in neighbouring columns.
template <class Rule>
__global__ void column_blocks_kernel(Rule rule, CodesOut out, const float* x, Blocks g) {
  rule.start();
  for (int64_t b = global_thread(); b < g.count; b += grid_threads()) {
    const BlockSpan s = block_span(g, b);
    float amax = 0.0f;
    for (int64_t r = s.r0; r < s.r0 + s.nr; ++r) amax = fmaxf(amax, fabsf(x[r * g.cols + s.c0]));
    const auto scale = rule.block(b, amax, true);
    for (int64_t r = s.r0; r < s.r0 + s.nr; ++r) {
      const int64_t i = r * g.cols + s.c0;
      out.put(r, s.c0, rule.value(i, x[i], scale));
    }
  }
}

// Blocks along rows: kLanes lanes per block (32 / kLanes blocks a warp), each lane taking every
// kLanes-th value of the block in row-major order. Every lane of a warp runs the same number of
// iterations (a group past the last block takes part with no values), so the shuffles always
// have the whole warp.
template <int kLanes, class Rule>
__global__ void row_blocks_kernel(Rule rule, CodesOut out, const float* x, Blocks g) {
  static_assert(kLanes == 16 || kLanes == 32, "a warp is one or two groups");
  constexpr int kPerWarp = 32 / kLanes;
  rule.start();
  const int lane = static_cast<int>(threadIdx.x % 32), member = lane % kLanes;
  const int64_t warp = global_thread() / 32, warps = grid_threads() / 32;
  for (int64_t first = warp * kPerWarp; first < g.count; first += warps * kPerWarp) {
    const int64_t b = first + lane / kLanes;
    const bool live = b < g.count;
    const BlockSpan s = live ? block_span(g, b) : BlockSpan{0, 0, 0, 1};
    // In-block offsets fit an int (a block holds at most 128x128 values): 32-bit division.
    const int nc = static_cast<int>(s.nc), n = static_cast<int>(s.nr) * nc;
    const float* base = x + s.r0 * g.cols + s.c0;
    float amax = 0.0f;
    for (int e = member; e < n; e += kLanes)
      amax = fmaxf(amax, fabsf(base[e / nc * g.cols + e % nc]));
    for (int o = kLanes / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
    if (!live) continue;
    const auto scale = rule.block(b, amax, member == 0);
    for (int e = member; e < n; e += kLanes) {
      const int64_t r = s.r0 + e / nc, c = s.c0 + e % nc, i = r * g.cols + c;
      out.put(r, c, rule.value(i, x[i], scale));
    }
  }
}

Blocks blocks_of(const BlockGrid& bg) {
  return {bg.rows, bg.cols, bg.block_rows, bg.block_cols, bg.grid_cols(), bg.blocks()};
}

template <class Rule>
void launch_rule(const BlockGrid& bg, const Rule& rule, CodesOut out, const float* x,
                 cudaStream_t stream) {
  const Blocks g = blocks_of(bg);
  if (g.block_cols == 1) {
    column_blocks_kernel<Rule>
        <<<grid_stride_blocks(g.count, kThreads, kMaxBlocks), kThreads, 0, stream>>>(rule, out, x,
                                                                                     g);
  } else if (g.block_rows * g.block_cols <= 16) {
    row_blocks_kernel<16, Rule>
        <<<grid_stride_blocks(g.count * 16, kThreads, kMaxBlocks), kThreads, 0, stream>>>(rule, out,
                                                                                          x, g);
  } else {
    row_blocks_kernel<32, Rule>
        <<<grid_stride_blocks(g.count * 32, kThreads, kMaxBlocks), kThreads, 0, stream>>>(rule, out,
                                                                                          x, g);
  }
  FP8LM_CUDA_CHECK_LAUNCH();
}

// A tensor's row-wise (1 x W blocks) and column-wise (W x 1) casts together, a CUDA block per
// W x W tile: its warps cast the tile's rows as launch_rule's row kernel does, then its first W
// threads its columns, reading the tile again while it is in cache, so the tensor leaves
// device memory once for both copies (TE casts a tensor into both layouts in one kernel).
// Column-wise codes wanted transposed (wgrad's K-major operand) gather in shared memory, a row
// of the transposed tile per column, and leave it a row at a time, so their stores are
// coalesced as the column threads' own would not be (neighbours there write `rows` apart).
template <class Rule>
__global__ void pair_kernel(Rule row, CodesOut row_codes, Rule col, CodesOut col_codes,
                            const float* x, int64_t rows, int64_t cols, int W) {
  extern __shared__ uint8_t transposed_tile[];  // [W][W + kTilePad] when col_codes.transposed
  row.start();
  col.start();
  const int64_t tile_cols = ceil_div(cols, W), tiles = ceil_div(rows, W) * tile_cols;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32), stride = W + kTilePad;
  const bool staged = col_codes.codes && col_codes.transposed;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t r0 = tile / tile_cols * W, c0 = tile % tile_cols * W;
    const int nr = static_cast<int>(rows - r0 < W ? rows - r0 : W);
    const int nc = static_cast<int>(cols - c0 < W ? cols - c0 : W);
    for (int r = warp; r < nr; r += warps) {  // row blocks: a warp per row of the tile
      const float* in = x + (r0 + r) * cols + c0;
      float amax = 0.0f;
      for (int c = lane; c < nc; c += 32) amax = fmaxf(amax, fabsf(in[c]));
      for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
      const auto scale = row.block((r0 + r) * tile_cols + c0 / W, amax, lane == 0);
      for (int c = lane; c < nc; c += 32)
        row_codes.put(r0 + r, c0 + c, row.value((r0 + r) * cols + c0 + c, in[c], scale));
    }
    for (int c = static_cast<int>(threadIdx.x); c < nc; c += static_cast<int>(blockDim.x)) {
      const float* in = x + r0 * cols + c0 + c;  // column blocks: a thread per column
      float amax = 0.0f;
      for (int r = 0; r < nr; ++r) amax = fmaxf(amax, fabsf(in[r * cols]));
      const auto scale = col.block(r0 / W * cols + c0 + c, amax, true);
      for (int r = 0; r < nr; ++r) {
        const uint8_t code = col.value((r0 + r) * cols + c0 + c, in[r * cols], scale);
        if (staged)
          transposed_tile[c * stride + r] = code;
        else
          col_codes.put(r0 + r, c0 + c, code);
      }
    }
    if (!staged) continue;
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < nc * nr; e += static_cast<int>(blockDim.x)) {
      const int c = e / nr, r = e % nr;
      col_codes.codes[(c0 + c) * rows + r0 + r] = transposed_tile[c * stride + r];
    }
    __syncthreads();  // the next tile's columns overwrite the buffer
  }
}

// A rule's operand from codes and block scales: an element per thread, in the operand's order.
template <class Rule>
__global__ void decode_kernel(uint16_t* operand, const uint8_t* codes, bool transposed,
                              const void* scales, Blocks g) {
  for (int64_t i = global_thread(); i < g.rows * g.cols; i += grid_threads()) {
    const int64_t r = i / g.cols, c = i % g.cols;
    const uint8_t code = codes[transposed ? c * g.rows + r : i];
    const int64_t b = r / g.block_rows * g.grid_cols + c / g.block_cols;
    operand[i] = Rule::operand_of(code, Rule::decode_scale(scales, b));
  }
}

// fn(Fp8Rule<F, kMx>{}) for the cast's FP8 format and scheme (MXFP8 or Float8BlockScaling).
template <class Fn>
void with_fp8_rule(const BlockCast& c, Fn&& fn) {
  const bool mx = c.scheme == BlockScheme::Mxfp8;
  if (c.format == DType::E4M3) {
    mx ? fn(Fp8Rule<DType::E4M3, true>{}) : fn(Fp8Rule<DType::E4M3, false>{});
  } else {
    mx ? fn(Fp8Rule<DType::E5M2, true>{}) : fn(Fp8Rule<DType::E5M2, false>{});
  }
}

struct RhtSigns {
  float s[kRhtSize];
};

// rht16_rows, element for element: the same products, sums and differences in the same order,
// each rounded on its own (no fused multiply-add).
__global__ void rht16_kernel(float* y, const float* x, int64_t rows, int64_t cols, RhtSigns signs) {
  const int64_t columns = rows / kRhtSize * cols;
  for (int64_t t = global_thread(); t < columns; t += grid_threads()) {
    const int64_t g = t / cols * kRhtSize, c = t % cols;
    float v[kRhtSize];
    for (int i = 0; i < kRhtSize; ++i) v[i] = __fmul_rn(x[(g + i) * cols + c], signs.s[i]);
    for (int h = 1; h < kRhtSize; h *= 2)
      for (int i = 0; i < kRhtSize; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = __fadd_rn(a, b);
          v[j + h] = __fsub_rn(a, b);
        }
    for (int i = 0; i < kRhtSize; ++i) y[(g + i) * cols + c] = __fmul_rn(v[i], 0.25f);
  }
}

void launch_nvfp4(const BlockCast& c, const BlockCastOut& out, const float* x, float* work,
                  cudaStream_t stream) {
  const BlockGrid& bg = c.grid;
  const int64_t n = bg.rows * bg.cols;
  float* amax = work + n;  // after the transformed tensor
  if (c.rht) {
    RhtSigns signs;
    for (int i = 0; i < kRhtSize; ++i) signs.s[i] = kRhtSigns[static_cast<size_t>(i)];
    rht16_kernel<<<grid_stride_blocks(bg.rows / kRhtSize * bg.cols, kThreads, 4096), kThreads, 0,
                   stream>>>(work, x, bg.rows, bg.cols, signs);
    FP8LM_CUDA_CHECK_LAUNCH();
    x = work;
  }
  FP8LM_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  absmax(amax, x, n, stream);
  auto* scales = static_cast<uint8_t*>(out.scales);
  if (c.stochastic_rounding)
    launch_rule(bg, Nvfp4Rule<true>{scales, out.operand, out.tensor_scale_inv, amax, c.sr_key},
                codes_out(bg, out), x, stream);
  else
    launch_rule(bg, Nvfp4Rule<false>{scales, out.operand, out.tensor_scale_inv, amax, c.sr_key},
                codes_out(bg, out), x, stream);
  if (out.amax)
    FP8LM_CUDA_CHECK(
        cudaMemcpyAsync(out.amax, amax, sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

bool block_cast_pair(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                     const BlockCastOut& col_out, const float* x, cudaStream_t stream) {
  const BlockGrid &r = row.grid, &c = col.grid;
  const int64_t W = r.block_cols;
  if (row.scheme != col.scheme || row.scheme == BlockScheme::Nvfp4 || row.format != col.format ||
      r.rows != c.rows || r.cols != c.cols || r.block_rows != 1 || c.block_cols != 1 ||
      c.block_rows != W || W < 2 || W > 1024)
    return false;
  // Transposed column codes are staged a tile at a time: within the default 48 KB of shared
  // memory up to W = 128 (Float8BlockScaling's, and MXFP8's 32); wider tiles cast apart.
  const bool staged = col_out.codes && col_out.codes_transposed;
  if (staged && W > kMaxStagedTile) return false;
  if (r.rows <= 0 || r.cols <= 0) return true;
  const size_t shared = staged ? static_cast<size_t>(W * (W + kTilePad)) : 0;
  const int64_t tiles = ceil_div(r.rows, W) * ceil_div(r.cols, W);
  with_fp8_rule(row, [&](auto tag) {
    using Rule = decltype(tag);
    pair_kernel<Rule><<<static_cast<unsigned>(std::min(tiles, kMaxBlocks)), W >= 128 ? 128 : 64,
                        shared, stream>>>(Rule::of(row, row_out), codes_out(r, row_out),
                                          Rule::of(col, col_out), codes_out(c, col_out), x, r.rows,
                                          r.cols, static_cast<int>(W));
    FP8LM_CUDA_CHECK_LAUNCH();
  });
  return true;
}

void block_decode_bf16(const BlockCodes& b, bf16_t* operand, cudaStream_t stream) {
  const BlockGrid& bg = b.cast.grid;
  if (bg.rows <= 0 || bg.cols <= 0) return;
  const auto launch = [&](auto tag) {
    decode_kernel<decltype(tag)>
        <<<grid_stride_blocks(bg.rows * bg.cols, kThreads, kMaxBlocks), kThreads, 0, stream>>>(
            operand, b.codes, b.transposed, b.scales, blocks_of(bg));
    FP8LM_CUDA_CHECK_LAUNCH();
  };
  if (b.cast.scheme == BlockScheme::Nvfp4) return launch(Nvfp4Rule<false>{});
  with_fp8_rule(b.cast, launch);
}

size_t block_cast_work_floats(const BlockCast& c) {
  return c.scheme == BlockScheme::Nvfp4 ? static_cast<size_t>(c.grid.rows * c.grid.cols) + 1 : 0;
}

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work,
                cudaStream_t stream) {
  if (c.grid.rows <= 0 || c.grid.cols <= 0) return;
  if (c.scheme == BlockScheme::Nvfp4) return launch_nvfp4(c, out, x, work, stream);
  with_fp8_rule(c, [&](auto tag) {
    launch_rule(c.grid, decltype(tag)::of(c, out), codes_out(c.grid, out), x, stream);
  });
}

}  // namespace fp8lm::cuda
