#pragma once
// One GEMM operand under a block-scaled recipe (issue 14): an FP32 tensor cast through one
// block layout, and the BF16 tensor the GEMM multiplies. Each value is its code decoded times
// its block's scale, exact in BF16: an E4M3/E5M2 value (at most 4 significant bits) times a
// power of two (E8M0, or Float8BlockScaling's power-of-two scale_inv), or an E2M1 value (2
// bits) times an E4M3 block scale (4 bits). So a BF16 GEMM with FP32 accumulation forms the
// block-scaled products exactly, as the GPUs' block-scaled tensor cores do; NVFP4's tensor
// scale 1/S is not folded in (it would round) but carried as the operand's scale_inv, which the
// GEMM applies to its output. (Exact down to BF16's smallest subnormal, 2^-133: a block whose
// amax is below about 2^-117 loses bits, far below any gradient that matters.)
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8/block_grid.h"
#include "fp8/fp8_block_quantize.h"
#include "fp8/recipe.h"

namespace fp8lm {

struct BlockScaleStats;

enum class BlockScheme : uint8_t { Fp8Block, Mxfp8, Nvfp4 };

// The scheme of a block-scaled recipe's kind (block, mxfp8, nvfp4).
BlockScheme block_scheme(ScalingKind k);

struct BlockCast {
  BlockScheme scheme = BlockScheme::Mxfp8;
  BlockGrid grid;                    // the tensor [rows, cols] and its blocks
  DType format = DType::E4M3;        // the FP8 schemes' element format
  BlockScalingParams params;         // Fp8Block (power-of-two scales only: see block_cast)
  bool rht = false;                  // Nvfp4: the 16x16 RHT down each column first
  bool stochastic_rounding = false;  // Nvfp4: with sr_key (core/counter_rng.h); else nearest
  uint32_t sr_key = 0;
};

struct BlockCastOut {
  uint8_t* codes = nullptr;           // [rows, cols]; null: not kept (FP8 schemes, no stats)
  void* scales = nullptr;             // block_scale_bytes(): E8M0, FP32 scale_inv, or E4M3 codes
  bf16_t* operand = nullptr;          // [rows, cols]; null: not written (the codes are kept)
  float* tensor_scale_inv = nullptr;  // 1/S for Nvfp4, else 1
  float* amax = nullptr;              // the tensor's amax (after the RHT where there is one)
  BlockScaleStats* stats = nullptr;   // host memory: what the cast did (fp8/block_stats.h)
  // The codes written transposed, [cols, rows] (BlockCodes::transposed): a column-wise cast's
  // codes in the layout a K-major GEMM reads, with no copy made later.
  bool codes_transposed = false;
};

size_t block_scale_bytes(const BlockCast& c);

// The codes and block scales (block_scale_bytes' layout) a block-scaled GEMM operand decodes
// from: what a backend with block-scaled GEMMs multiplies instead of the BF16 operand
// (Backend::block_scaled_gemms, GemmOperand::block).
struct BlockCodes {
  BlockCast cast;
  const uint8_t* codes = nullptr;
  const void* scales = nullptr;
  // The codes are stored transposed ([cols, rows]; cast.grid and the scales still describe
  // the tensor as [rows, cols]): a column-wise cast written in the layout a K-major GEMM reads
  // (TE's columnwise data), beside the decoded operand in the tensor's own layout.
  bool transposed = false;
};

// The tensors a block-scaled GEMM reads, in TE's roles.
enum class BlockRole : uint8_t { Input, Weight, GradOutput };

// The cast recipe r (block, mxfp8 or nvfp4) makes of a [rows, cols] tensor in `role`, blocked
// along rows (columnwise) or along cols: TE's blocks for each recipe and role, the 2D weight
// blocks (which serve both directions), NVFP4's RHT on the column-wise copies of inputs and
// gradients and its stochastic rounding of gradients (sr_key left for the caller).
BlockCast recipe_block_cast(const Fp8Recipe& r, BlockRole role, bool columnwise, int64_t rows,
                            int64_t cols);

// The values a cast's codes and scales stand for: decode(code) x block scale x tensor scale_inv,
// element by element (what a checkpoint's block-scaled FP8 weight loads as).
std::vector<float> block_decode(const BlockCast& c, const uint8_t* codes, const void* scales,
                                float tensor_scale_inv);

// Throws Error for an RHT whose rows are not a multiple of 16, or Float8BlockScaling without
// power-of-two scales (its decoded values times an FP32 scale_inv are not exact in BF16): the
// casts no backend makes.
void check_block_cast(const BlockCast& c);

// Whether a cast writes x's Hadamard transform out, to the caller's `work`, for its statistics
// to read; every other cast keeps the transform in registers and leaves `work` alone.
bool block_cast_writes_transform(const BlockCast& c, const BlockCastOut& out);

// Casts x (host memory) into out, after check_block_cast. `work` holds rows * cols floats where
// block_cast_writes_transform; else it is unused and may be null.
void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x, float* work);

// A tensor's row-wise and column-wise casts (row blocked along cols, col down rows: the two
// copies recipe_block_cast makes for one role), the same bits as two block_cast calls in one
// sweep: the amaxes taken in one read, each stripe cast both ways while it is in cache. Casts
// that collect statistics (or whose grids do not pair so) are made one after the other.
void block_cast_pair(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                     const BlockCastOut& col_out, const float* x, float* work);

// The bytes block_cast (block_cast_pair) moves, nominally (kernels/traffic.h): x read once per
// sweep, the cast's and, before it, the amax sweep of NVFP4's global scale or an amax asked for
// (one for both copies of a pair, whose second cast reads each stripe from cache); the BF16
// operand, the codes (through scratch where transposed), the block scales and a transform the
// statistics read written. The statistics' own reads are left out.
int64_t block_cast_traffic(const BlockCast& c, const BlockCastOut& out);
int64_t block_cast_pair_traffic(const BlockCast& row, const BlockCastOut& row_out,
                                const BlockCast& col, const BlockCastOut& col_out);

// Whether a scheme's casts need nothing of a tensor beyond each stripe of its rows: all but
// NVFP4, whose global scale comes from the whole tensor's amax.
bool scheme_castable_by_stripes(BlockScheme s);

// Whether a producer can hand c's cast its values a stripe of rows at a time
// (block_cast_produced): a scheme_castable_by_stripes cast that reads no whole tensor after
// (statistics), writing its BF16 operand, its codes (if kept) in the tensor's layout.
bool castable_by_stripes(const BlockCast& c, const BlockCastOut& out);

// Writes rows [r0, r0 + nr) of the tensor being cast into stripe (nr * cols floats).
using MakeStripe = std::function<void(int64_t r0, int64_t nr, float* stripe)>;

// row's cast, and col's where col is not null (block_cast_pair's two copies), of a tensor that
// never exists in full: `make` writes each stripe of rows into a per-thread buffer, which is
// cast while it is in cache (the fused producers of kernels/cpu, as produce_fp8_rows does for
// the per-tensor casts). The same bits as block_cast_pair (or block_cast) of the whole tensor.
// Throws Error unless both casts are castable_by_stripes over the same [rows, cols].
void block_cast_produced(const BlockCast& row, const BlockCastOut& row_out, const BlockCast* col,
                         const BlockCastOut* col_out, const MakeStripe& make);

}  // namespace fp8lm
