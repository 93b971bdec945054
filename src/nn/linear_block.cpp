// Linear under the block-scaled recipes (issue 14): see linear.h. Each operand is cast for the
// GEMM that reads it (fp8/block_cast.h: codes and block scales, and the exact BF16 operand the
// GEMM multiplies, its tensor scale carried as the operand's scale_inv).
#include "core/counter_rng.h"
#include "nn/fusion.h"
#include "nn/linear.h"
#include "nn/saved_activation.h"
#include "nn/scratch.h"

namespace fp8lm {

bool fused_block_casts(const Linear& consumer) {
  return fusion_enabled() && consumer.gemm_precision() == Precision::Fp8 &&
         autocast_state().recipe.block_scaled() && consumer.block_input_castable_by_producer();
}

namespace {

// Slots of block_scale_inv_: the tensor scales of the activation operands in use.
enum ScaleInv { kInputRow, kInputCol, kGradRow, kGradCol };

// Whether a weight cast kept under recipe `a` is the one `b` makes.
bool same_weight_cast(const Fp8Recipe& a, const Fp8Recipe& b) {
  return a.kind == b.kind && a.block.power_2_scale == b.block.power_2_scale &&
         a.block.amax_epsilon == b.block.amax_epsilon &&
         a.nvfp4.disable_2d_quantization == b.nvfp4.disable_2d_quantization;
}

}  // namespace

Linear::BlockCastJob Linear::block_cast_job(BlockRole role, bool columnwise, int64_t rows,
                                            int64_t cols, bf16_t* operand, float* scale_inv,
                                            KeptBlockCodes kept) {
  BlockCast c = recipe_block_cast(recipe_, role, columnwise, rows, cols);
  const bool two_d = c.grid.block_rows > 1 && c.grid.block_cols > 1;
  // Each GEMM and copy its own stream of draws.
  if (c.stochastic_rounding) {
    c.sr_key = counter_key(sr_seed_ + 0x9e3779b97f4a7c15ull *
                                          static_cast<uint64_t>(2 * gemm_ + (columnwise ? 2 : 1)));
  }
  // The codes only where something reads them: statistics, a device's cast; else the casts
  // write the operand alone. Codes kept go straight to the module's buffers: scratch is shared
  // with the casts whose codes are still to be read (x's row-wise ones by forward's GEMM
  // while the weight is cast). A column-wise cast has scratch of its own, as it may run beside
  // the row-wise one (block_operands).
  const bool col = columnwise && !two_d;
  const bool native = be_.block_scaled_gemms(c.scheme);
  uint8_t* codes = nullptr;
  void* scales = nullptr;
  if (kept.codes && (native || kept.always)) {
    kept.codes->resize(static_cast<size_t>(rows * cols));
    kept.scales->resize(block_scale_bytes(c));
    codes = kept.codes->data();
    scales = kept.scales->data();
  } else {
    if (collect_block_stats_ || !be_.host_memory() || native)
      codes =
          scratch<uint8_t>(be_, col ? Scratch::BlockCodesCol : Scratch::BlockCodes, rows * cols);
    scales = scratch_bytes(be_, col ? Scratch::BlockScalesCol : Scratch::BlockScales,
                           block_scale_bytes(c));
  }
  // Where the backend multiplies the codes, as TE does: no BF16 operand (operand_in gives
  // none), and a column-wise cast's codes written transposed, the K-major layout wgrad reads
  // with no copy (BlockCodes::transposed).
  BlockCastOut out{codes, scales, operand, scale_inv, nullptr};
  out.codes_transposed = native && col;
  if (collect_block_stats_) {
    static constexpr const char* kRoles[] = {"input", "weight", "grad_output"};
    const std::string role_name = kRoles[static_cast<int>(role)];
    out.stats = &block_stats_[col ? role_name + "_columnwise" : role_name];
  }
  return {c, out, {c, codes, scales, out.codes_transposed}, native};
}

bool Linear::blocks_native() const {
  return be_.block_scaled_gemms(block_scheme(recipe_.kind));
}

bf16_t* Linear::operand_in(Scratch slot, int64_t n) {
  return blocks_native() ? nullptr : scratch<bf16_t>(be_, slot, n);
}

bf16_t* Linear::operand_in(BackendBuffer<bf16_t>& kept, int64_t n) {
  if (blocks_native()) {
    kept.clear();
    return nullptr;
  }
  kept.resize(static_cast<size_t>(n));
  return kept.data();
}

GemmOperand Linear::block_operand(const BlockCastJob& job, const float* src) {
  be_.block_cast(job.cast, job.out, src);
  return job.operand();
}

void Linear::block_operands(const BlockCastJob& row, const BlockCastJob& col, const float* src) {
  be_.block_cast_pair(row.cast, row.out, col.cast, col.out, src);
}

bool Linear::weight_blocks_2d() const {
  const BlockGrid g = recipe_block_cast(recipe_, BlockRole::Weight, false, 1, 1).grid;
  return g.block_rows > 1;
}

BlockCast Linear::fp8_weight_block_cast() const {
  return recipe_block_cast(recipe_, BlockRole::Weight, false, out_, in_);
}

void Linear::requantize_block_weight() {
  const BlockCastJob job =
      block_cast_job(BlockRole::Weight, false, out_, in_, operand_in(w_row_.operand, out_ * in_),
                     w_row_.scale_inv.data(), {&qw_, &qw_block_scales_, true});
  block_operand(job, weight_.data());
  ++qw_cast_;  // qw_ holds new codes (a per-tensor cast's decoded values no longer match them)
  w_row_.block = job.kept();
  w_row_.version = weight_.version;
  w_row_.recipe = recipe_;
}

GemmOperand Linear::block_weight(bool columnwise) {
  const bool two_d = weight_blocks_2d();
  if (columnwise && two_d && blocks_native()) return transposed_2d_weight();
  BlockWeightCast& w = columnwise && !two_d ? w_col_ : w_row_;
  // Collecting statistics casts again so that each GEMM's cast is recorded.
  const bool stale = w.version != weight_.version || !same_weight_cast(w.recipe, recipe_);
  if (stale && fp8_weights_ && &w == &w_row_) {
    requantize_block_weight();  // the module's FP8 weight is this cast
  } else if (stale || collect_block_stats_) {
    const BlockCastJob job =
        block_cast_job(BlockRole::Weight, columnwise, out_, in_, operand_in(w.operand, out_ * in_),
                       w.scale_inv.data(), {&w.codes, &w.scales});
    w.block = job.kept();
    block_operand(job, weight_.data());
    w.version = weight_.version;
    w.recipe = recipe_;
  }
  return {w.operand.data(), DType::BF16, w.scale_inv.data(), w.block.codes ? &w.block : nullptr};
}

GemmOperand Linear::transposed_2d_weight() {
  const GemmOperand row = block_weight(false);
  if (w_col_.version != w_row_.version || !same_weight_cast(w_col_.recipe, w_row_.recipe) ||
      collect_block_stats_) {
    w_col_.codes.resize(static_cast<size_t>(out_ * in_));
    be_.transpose_fp8(w_col_.codes.data(), w_row_.block.codes, out_, in_);
    w_col_.block = w_row_.block;
    w_col_.block.codes = w_col_.codes.data();
    w_col_.block.transposed = true;
    w_col_.version = w_row_.version;
    w_col_.recipe = w_row_.recipe;
  }
  return {nullptr, DType::BF16, row.scale_inv, &w_col_.block};
}

ProducerOut Linear::begin_block_forward(int64_t rows) {
  mode_ = Precision::Fp8;
  recipe_ = autocast_state().recipe;
  sr_seed_ = autocast_state().step_seed;
  float* s = block_scale_inv_.data();
  input_row_ = block_cast_job(BlockRole::Input, false, rows, in_,
                              operand_in(Scratch::BlockInput, rows * in_), s + kInputRow);
  // Training: also x blocked down its columns (along the tokens dW sums over), saved for the
  // weight gradient, cast in the same sweep.
  input_col_made_ = training_forward();
  if (input_col_made_) {
    input_col_ = block_cast_job(BlockRole::Input, true, rows, in_, operand_in(x_col_, rows * in_),
                                s + kInputCol, {&x_col_codes_, &x_col_scales_});
    x_col_block_ = input_col_.kept();
  }
  return ProducerOut::block_scaled({&input_row_.cast, &input_row_.out,
                                    input_col_made_ ? &input_col_.cast : nullptr,
                                    input_col_made_ ? &input_col_.out : nullptr});
}

void Linear::forward_block_input(float* y, int64_t rows, bool add_bias) {
  forward_product(input_row_.operand(), block_weight(false), y, rows, add_bias, true);
}

bool Linear::block_input_castable_by_producer() const {
  return be_.produces_block_casts() && !collect_block_stats_ && !blocks_native() &&
         scheme_castable_by_stripes(block_scheme(autocast_state().recipe.kind));
}

void Linear::forward_block(const float* x, float* y, int64_t rows, bool add_bias) {
  begin_block_forward(rows);
  if (input_col_made_) {
    block_operands(input_row_, input_col_, x);
  } else {
    block_operand(input_row_, x);
  }
  forward_block_input(y, rows, add_bias);
}

void Linear::backward_block(const float* dy, float* dx, float* dw, int64_t rows, float beta,
                            float wbeta) {
  float* s = block_scale_inv_.data();
  const BlockCastJob g_col =
      block_cast_job(BlockRole::GradOutput, true, rows, out_,
                     operand_in(Scratch::BlockDyCol, rows * out_), s + kGradCol);
  if (dx) {
    const BlockCastJob g = block_cast_job(BlockRole::GradOutput, false, rows, out_,
                                          operand_in(Scratch::LinearDy, rows * out_), s + kGradRow);
    block_operands(g, g_col, dy);
    be_.gemm(Trans::N, Trans::N, rows, in_, out_, 1.0f, g.operand(), block_weight(true), beta, dx);
  } else {
    block_operand(g_col, dy);
  }
  be_.gemm(
      Trans::T, Trans::N, out_, in_, rows, 1.0f, g_col.operand(),
      {x_col_.data(), DType::BF16, s + kInputCol, x_col_block_.codes ? &x_col_block_ : nullptr},
      wbeta, dw);
}

}  // namespace fp8lm
