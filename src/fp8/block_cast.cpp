#include "fp8/block_cast.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/e2m1.h"
#include "core/e8m0.h"
#include "core/grown.h"
#include "fp8/block_stats.h"
#include "fp8/hadamard.h"
#include "fp8/mx_quantize.h"
#include "fp8/nvfp4_quantize.h"
#include "fp8/quantize_isa.h"
#include "fp8lm/error.h"

namespace fp8lm {

size_t block_scale_bytes(const BlockCast& c) {
  const auto n = static_cast<size_t>(c.grid.blocks());
  return c.scheme == BlockScheme::Fp8Block ? n * sizeof(float) : n;
}

BlockScheme block_scheme(ScalingKind k) {
  return k == ScalingKind::Block   ? BlockScheme::Fp8Block
         : k == ScalingKind::Mxfp8 ? BlockScheme::Mxfp8
                                   : BlockScheme::Nvfp4;
}

BlockCast recipe_block_cast(const Fp8Recipe& r, BlockRole role, bool columnwise, int64_t rows,
                            int64_t cols) {
  BlockCast c;
  c.scheme = block_scheme(r.kind);
  c.params = r.block;
  const int64_t b = c.scheme == BlockScheme::Fp8Block ? kFp8Block
                    : c.scheme == BlockScheme::Mxfp8  ? kMxBlock
                                                      : kNvfp4Block;
  // Weights in 2D blocks: Float8BlockScaling's w_block_scaling_dim = 2, NVFP4's 2D
  // quantization (TE recipe/__init__.py); MXFP8's weights are 1D like everything else.
  const bool two_d = role == BlockRole::Weight &&
                     (r.kind == ScalingKind::Block ||
                      (r.kind == ScalingKind::Nvfp4 && !r.nvfp4.disable_2d_quantization));
  c.grid = two_d        ? BlockGrid{rows, cols, b, b}
           : columnwise ? BlockGrid{rows, cols, b, 1}
                        : BlockGrid{rows, cols, 1, b};
  if (c.scheme == BlockScheme::Nvfp4) {
    // TE: the RHT on the column-wise (wgrad) copies of inputs and gradients; stochastic
    // rounding on gradients only.
    c.rht = columnwise && role != BlockRole::Weight && !r.nvfp4.disable_rht;
    c.stochastic_rounding = role == BlockRole::GradOutput && !r.nvfp4.disable_stochastic_rounding;
  }
  return c;
}

std::vector<float> block_decode(const BlockCast& c, const uint8_t* codes, const void* scales,
                                float tensor_scale_inv) {
  const BlockGrid& g = c.grid;
  std::vector<float> y(static_cast<size_t>(g.rows * g.cols));
  for (int64_t r = 0; r < g.rows; ++r) {
    for (int64_t col = 0; col < g.cols; ++col) {
      const int64_t i = r * g.cols + col, b = g.block_of(r, col);
      float v = 0.0f;
      switch (c.scheme) {
        case BlockScheme::Fp8Block:
          v = fp8_decode(codes[i], c.format) * static_cast<const float*>(scales)[b];
          break;
        case BlockScheme::Mxfp8:
          v = fp8_decode(codes[i], c.format) * e8m0_decode(static_cast<const uint8_t*>(scales)[b]);
          break;
        case BlockScheme::Nvfp4:
          v = kE2M1Values[codes[i] & 0xf] *
              fp8_decode(static_cast<const uint8_t*>(scales)[b], DType::E4M3);
          break;
      }
      y[static_cast<size_t>(i)] = v * tensor_scale_inv;
    }
  }
  return y;
}

namespace {

// f(first row, rows) over stripes of whole block rows, spread over the OpenMP threads: each
// stripe's blocks, codes and scales are its own, and stochastic rounding's draws follow an
// element's place, so the split changes no bit.
template <class F>
void for_each_stripe(const BlockGrid& g, F f) {
  // About 64K values a task: enough to amortize the fork, small enough to balance.
  const int64_t per = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.block_rows * g.cols));
  const int64_t stripes = g.grid_rows();
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < stripes; s += per) {
    const int64_t r0 = s * g.block_rows;
    f(r0, std::min(per * g.block_rows, g.rows - r0));
  }
}

// absmax over the OpenMP threads (a maximum is the same in any order).
float parallel_absmax(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  float amax = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : amax)
  for (int64_t i = 0; i < n; i += kChunk)
    amax = std::max(amax, absmax(x + i, std::min(kChunk, n - i)));
  return amax;
}

}  // namespace

void check_block_cast(const BlockCast& c) {
  if (c.scheme == BlockScheme::Fp8Block && !c.params.power_2_scale) {
    throw Error(
        "Float8BlockScaling without power-of-two scales is not emulated: its FP32 scale_inv "
        "times a decoded value is not exact in BF16");
  }
  if (c.scheme == BlockScheme::Nvfp4 && c.rht && c.grid.rows % kRhtSize != 0) {
    throw Error(
        fmt::format("NVFP4's Hadamard transform needs a multiple of 16 rows (tokens), not {}; "
                    "use disable_rht or a batch of batch_size x seq_len that is",
                    c.grid.rows));
  }
}

namespace {

// Rows [r0, r0 + nr) of a tensor (whole block rows of c's grid), their values at xs, cast as a
// tensor of their own into their place in out. amax: the tensor's (NVFP4's global scale; the
// transform's where rht_in_cast applies the RHT as it casts).
void cast_stripe(const BlockCast& c, const BlockCastOut& out, const float* xs, int64_t r0,
                 int64_t nr, float amax, bool rht_in_cast) {
  const BlockGrid& g = c.grid;
  const BlockGrid sub{nr, g.cols, g.block_rows, g.block_cols};
  const int64_t scale_at = (r0 / g.block_rows) * g.grid_cols(), at = r0 * g.cols;
  uint8_t* codes = out.codes ? out.codes + at : nullptr;
  switch (c.scheme) {
    case BlockScheme::Mxfp8:
      mxfp8_quantize_to_bf16(codes, static_cast<uint8_t*>(out.scales) + scale_at, out.operand + at,
                             xs, sub, c.format);
      break;
    case BlockScheme::Fp8Block:
      fp8_block_quantize_to_bf16(codes, static_cast<float*>(out.scales) + scale_at,
                                 out.operand + at, xs, sub, c.format, c.params);
      break;
    case BlockScheme::Nvfp4:
      nvfp4_quantize_to_bf16(codes, static_cast<uint8_t*>(out.scales) + scale_at, out.operand + at,
                             xs, sub, amax, c.stochastic_rounding ? &c.sr_key : nullptr, at,
                             rht_in_cast);
      break;
  }
}

// The amaxes a cast needs: x's, and for an NVFP4 cast with the RHT the transform's, taken
// over stripes of 16 rows: x's from the transform's registers on AVX-512 (elsewhere, and with
// `work`, in a second read, from cache). Where `work` is given the transform is written there
// instead of kept in registers (the statistics read it).
struct Amaxes {
  float plain = 0.0f, rht = 0.0f;
  // This with a stripe's amaxes maxed in, from any OpenMP thread.
  void merge(const Amaxes& t) {
#pragma omp critical(fp8lm_rht_amax)
    {
      plain = std::max(plain, t.plain);
      rht = std::max(rht, t.rht);
    }
  }
};
Amaxes tensor_amaxes(const float* x, int64_t rows, int64_t cols, bool plain, bool rht,
                     float* work) {
  Amaxes a;
  if (!rht) {
    if (plain) a.plain = parallel_absmax(x, rows * cols);
    return a;
  }
  for_each_stripe({rows, cols, kRhtSize, 1}, [&](int64_t r0, int64_t nr) {
    const float* s = x + r0 * cols;
    Amaxes t;
    if (work) {
      rht16_rows(work + r0 * cols, s, nr, cols);
      t.rht = absmax(work + r0 * cols, nr * cols);
      if (plain) t.plain = absmax(s, nr * cols);
    } else {
      t.rht = rht16_absmax(s, nr, cols, plain ? &t.plain : nullptr);
    }
    a.merge(t);
  });
  return a;
}

// Whether a cast needs x's own amax: NVFP4's global scale (without the transform), or asked for.
bool needs_plain_amax(const BlockCast& c, const BlockCastOut& out) {
  return !c.rht && (c.scheme == BlockScheme::Nvfp4 || out.amax);
}

// What a cast's out reports once its stripes are done.
void finish_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float amax) {
  *out.tensor_scale_inv =
      c.scheme == BlockScheme::Nvfp4 ? 1.0f / nvfp4_global_encode_scale(amax) : 1.0f;
  if (out.amax) *out.amax = amax;
  if (out.stats) *out.stats = block_scale_stats(c, x, out.codes, out.scales, *out.tensor_scale_inv);
}

// A cast's out as the stripes write it, row-major codes and an operand: scratch of its own for
// the codes where out wants them transposed and for an operand out does not keep; finish()
// moves the codes into place. (The statistics read the row-major codes.)
class StripesOut {
 public:
  StripesOut(const BlockCast& c, const BlockCastOut& out)
      : out_(out), stripes_(out), rows_(c.grid.rows), cols_(c.grid.cols) {
    const auto n = static_cast<size_t>(rows_ * cols_);
    if (out.codes && out.codes_transposed) {
      codes_.resize(n);
      stripes_.codes = codes_.data();
    }
    if (!out.operand) {
      operand_.resize(n);
      stripes_.operand = operand_.data();
    }
    stripes_.codes_transposed = false;
  }
  const BlockCastOut& out() const { return stripes_; }
  void finish() const {
    if (codes_.empty()) return;
    constexpr int64_t kTile = 64;  // a tile of each layout in cache at once
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < cols_; c0 += kTile)
      for (int64_t r0 = 0; r0 < rows_; r0 += kTile)
        for (int64_t c = c0; c < std::min(c0 + kTile, cols_); ++c)
          for (int64_t r = r0; r < std::min(r0 + kTile, rows_); ++r)
            out_.codes[c * rows_ + r] = codes_[static_cast<size_t>(r * cols_ + c)];
  }

 private:
  const BlockCastOut& out_;
  BlockCastOut stripes_;
  int64_t rows_, cols_;
  std::vector<uint8_t> codes_;
  std::vector<bf16_t> operand_;
};

void cast_row_major(const BlockCast& c, const BlockCastOut& out, const float* x, float* work) {
  check_block_cast(c);
  const BlockGrid& g = c.grid;
  const bool rht_in_cast = c.rht && !block_cast_writes_transform(c, out);
  const Amaxes a = tensor_amaxes(x, g.rows, g.cols, needs_plain_amax(c, out), c.rht,
                                 rht_in_cast ? nullptr : work);
  if (c.rht && !rht_in_cast) x = work;
  const float amax = c.rht ? a.rht : a.plain;
  for_each_stripe(g, [&](int64_t r0, int64_t nr) {
    cast_stripe(c, out, x + r0 * g.cols, r0, nr, amax, rht_in_cast);
  });
  finish_cast(c, out, x, amax);
}

}  // namespace

bool block_cast_writes_transform(const BlockCast& c, const BlockCastOut& out) {
  return c.rht && out.stats;
}

void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work) {
  const StripesOut laid(c, out);
  cast_row_major(c, laid.out(), x, work);
  laid.finish();
}

namespace {

// Whether block_cast_pair casts both copies in one sweep: a row-wise and a column-wise grid of
// one tensor, neither collecting statistics (they read each cast on its own, and the transform
// written out).
bool pair_in_one_sweep(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                       const BlockCastOut& col_out) {
  return !row_out.stats && !col_out.stats && row.grid.block_rows == 1 && col.grid.block_cols == 1 &&
         row.grid.rows == col.grid.rows && row.grid.cols == col.grid.cols;
}

// Whether a pair in one sweep is NVFP4's as TE's recipe makes it, the column-wise copy through
// the transform, on AVX-512: its amax sweep then keeps every block's amax, so that the casts
// after it take their scales from memory (cast_nvfp4_pair; the bits of nvfp4_quantize_to_bf16,
// which takes each block's amax from its values just before it casts them).
bool nvfp4_pair_from_block_amaxes(const BlockCast& row, const BlockCast& col) {
  return best_isa() == Isa::Avx512 && row.scheme == BlockScheme::Nvfp4 &&
         col.scheme == BlockScheme::Nvfp4 && !row.rht && col.rht &&
         row.grid.block_cols == kNvfp4Block && col.grid.block_rows == kNvfp4Block;
}

// What a cast writes: the BF16 operand (into scratch where out keeps none), the codes (through
// scratch, read back, where they are transposed), the block scales; and the transform where
// the statistics read it.
int64_t cast_writes(const BlockCast& c, const BlockCastOut& out) {
  const int64_t n = c.grid.rows * c.grid.cols;
  const int64_t codes = out.codes ? (out.codes_transposed ? 3 : 1) : 0;
  const int64_t transform = block_cast_writes_transform(c, out) ? 4 : 0;
  return n * (2 + codes + transform) + static_cast<int64_t>(block_scale_bytes(c));
}

// Whether a cast sweeps x for an amax before it casts (NVFP4's global scale, an amax asked for).
bool sweeps_for_amax(const BlockCast& c, const BlockCastOut& out) {
  return c.rht || needs_plain_amax(c, out);
}

// x's reads: the cast's sweep, and the amax sweep before it where there is one.
int64_t reads_of_x(const BlockGrid& g, bool amax_sweep) {
  return g.rows * g.cols * 4 * (amax_sweep ? 2 : 1);
}

}  // namespace

int64_t block_cast_traffic(const BlockCast& c, const BlockCastOut& out) {
  return reads_of_x(c.grid, sweeps_for_amax(c, out)) + cast_writes(c, out);
}

int64_t block_cast_pair_traffic(const BlockCast& row, const BlockCastOut& row_out,
                                const BlockCast& col, const BlockCastOut& col_out) {
  if (!pair_in_one_sweep(row, row_out, col, col_out))
    return block_cast_traffic(row, row_out) + block_cast_traffic(col, col_out);
  const bool amax_sweep = sweeps_for_amax(row, row_out) || sweeps_for_amax(col, col_out);
  // The kept block amaxes, an FP32 for each block of both copies, written and read back.
  const int64_t kept_amaxes =
      nvfp4_pair_from_block_amaxes(row, col) ? 2 * 4 * (row.grid.blocks() + col.grid.blocks()) : 0;
  return reads_of_x(row.grid, amax_sweep) + cast_writes(row, row_out) + cast_writes(col, col_out) +
         kept_amaxes;
}

namespace {

// The pair of nvfp4_pair_from_block_amaxes: the sweep, then each stripe cast both ways.
void cast_nvfp4_pair(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                     const BlockCastOut& col_out, const float* x) {
  const BlockGrid& g = col.grid;  // rows: a multiple of 16 (check_block_cast, the transform)
  const int64_t tiles = row.grid.grid_cols();
  thread_local std::vector<float> row_storage, col_storage;
  float* row_amax = grown(row_storage, static_cast<size_t>(g.rows * tiles));
  float* col_amax = grown(col_storage, static_cast<size_t>(g.rows / kNvfp4Block * g.cols));
  Amaxes a;
  for_each_stripe(g, [&](int64_t r0, int64_t nr) {
    Amaxes t;
    t.rht = isa::nvfp4_pair_amaxes_avx512(x + r0 * g.cols, nr, g.cols, row_amax + r0 * tiles,
                                          col_amax + r0 / kNvfp4Block * g.cols, &t.plain);
    a.merge(t);
  });
  const float row_encode = nvfp4_global_encode_scale(a.plain),
              col_encode = nvfp4_global_encode_scale(a.rht);
  const uint32_t* row_key = row.stochastic_rounding ? &row.sr_key : nullptr;
  const uint32_t* col_key = col.stochastic_rounding ? &col.sr_key : nullptr;
  for_each_stripe(g, [&](int64_t r0, int64_t nr) {
    const int64_t at = r0 * g.cols;
    isa::nvfp4_rows_from_amaxes_avx512(row_out.codes ? row_out.codes + at : nullptr,
                                       static_cast<uint8_t*>(row_out.scales) + r0 * tiles,
                                       row_out.operand + at, x + at, nr, g.cols, row_encode,
                                       row_key, at, row_amax + r0 * tiles);
    isa::nvfp4_columns_from_amaxes_avx512(
        col_out.codes ? col_out.codes + at : nullptr,
        static_cast<uint8_t*>(col_out.scales) + r0 / kNvfp4Block * g.cols, col_out.operand + at,
        x + at, nr, g.cols, col_encode, col_key, at, col_amax + r0 / kNvfp4Block * g.cols);
  });
  finish_cast(row, row_out, x, a.plain);
  finish_cast(col, col_out, x, a.rht);
}

}  // namespace

void block_cast_pair(const BlockCast& row, const BlockCastOut& row_pair_out, const BlockCast& col,
                     const BlockCastOut& col_pair_out, const float* x, float* work) {
  const BlockGrid& g = col.grid;
  if (!pair_in_one_sweep(row, row_pair_out, col, col_pair_out)) {
    block_cast(row, row_pair_out, x, work);
    block_cast(col, col_pair_out, x, work);
    return;
  }
  const StripesOut row_laid(row, row_pair_out), col_laid(col, col_pair_out);
  const BlockCastOut &row_out = row_laid.out(), &col_out = col_laid.out();
  check_block_cast(row);
  check_block_cast(col);
  if (nvfp4_pair_from_block_amaxes(row, col)) {
    cast_nvfp4_pair(row, row_out, col, col_out, x);
    row_laid.finish();
    col_laid.finish();
    return;
  }
  const Amaxes a = tensor_amaxes(x, g.rows, g.cols,
                                 needs_plain_amax(row, row_out) || needs_plain_amax(col, col_out),
                                 row.rht || col.rht, nullptr);
  const float row_amax = row.rht ? a.rht : a.plain, col_amax = col.rht ? a.rht : a.plain;
  // Stripes of the column-wise grid's block rows are whole block rows of both grids.
  for_each_stripe(g, [&](int64_t r0, int64_t nr) {
    cast_stripe(row, row_out, x + r0 * g.cols, r0, nr, row_amax, row.rht);
    cast_stripe(col, col_out, x + r0 * g.cols, r0, nr, col_amax, col.rht);
  });
  finish_cast(row, row_out, x, row_amax);
  finish_cast(col, col_out, x, col_amax);
  row_laid.finish();
  col_laid.finish();
}

bool scheme_castable_by_stripes(BlockScheme s) {
  return s != BlockScheme::Nvfp4;
}

bool castable_by_stripes(const BlockCast& c, const BlockCastOut& out) {
  return scheme_castable_by_stripes(c.scheme) && out.operand && !out.stats && !out.amax &&
         !out.codes_transposed;
}

void block_cast_produced(const BlockCast& row, const BlockCastOut& row_out, const BlockCast* col,
                         const BlockCastOut* col_out, const MakeStripe& make) {
  const BlockGrid& g = row.grid;
  if (!castable_by_stripes(row, row_out) || (col && !castable_by_stripes(*col, *col_out))) {
    throw Error(
        "block_cast_produced: a cast that needs the whole tensor (NVFP4's global scale, "
        "statistics) or writes no BF16 operand");
  }
  if (col && (col->grid.rows != g.rows || col->grid.cols != g.cols))
    throw Error("block_cast_produced: row-wise and column-wise casts of different tensors");
  check_block_cast(row);
  if (col) check_block_cast(*col);
  // Stripes of whole block rows of both grids; a row-wise grid alone takes 32 rows at a time.
  const int64_t tall = std::max(g.block_rows, col ? col->grid.block_rows : int64_t{1});
  const int64_t height = tall > 1 ? tall : 32;
  if (height % g.block_rows != 0 || (col && height % col->grid.block_rows != 0))
    throw Error("block_cast_produced: block rows that do not nest");
  const int64_t stripes = (g.rows + height - 1) / height;
  // Below about 32K values an OpenMP region costs more than it saves (the CPU producers'
  // threshold, kernels/cpu/row_reduce.h's kParallelMin).
  constexpr int64_t kParallelMin = int64_t{1} << 15;
#pragma omp parallel if (g.rows * g.cols >= kParallelMin)
  {
    thread_local std::vector<float> buffer;  // grown once: a steady step allocates nothing
    float* stripe = grown(buffer, static_cast<size_t>(height * g.cols));
#pragma omp for schedule(static)
    for (int64_t s = 0; s < stripes; ++s) {
      const int64_t r0 = s * height, nr = std::min(height, g.rows - r0);
      make(r0, nr, stripe);
      cast_stripe(row, row_out, stripe, r0, nr, 0.0f, false);
      if (col) cast_stripe(*col, *col_out, stripe, r0, nr, 0.0f, false);
    }
  }
  finish_cast(row, row_out, nullptr, 0.0f);
  if (col) finish_cast(*col, *col_out, nullptr, 0.0f);
}

}  // namespace fp8lm
