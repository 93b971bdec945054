#pragma once
// TE's Linear: y = x · Wᵀ + b with W [out, in]. The GEMM runs in FP8 inside an enabled
// Autocast (docs/reference/numerics.md: x and W quantized E4M3 with their slots' scales; in
// backward dy is quantized with the grad_output slot, E5M2 under HYBRID; the FP8 x is saved for
// dW), else in the GemmPrecision of the forward (bf16 or fp32). Backward uses what forward used.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/precision.h"
#include "fp8/block_cast.h"
#include "fp8/block_stats.h"
#include "fp8/scaling.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "nn/autocast.h"
#include "nn/parameter.h"
#include "nn/scaling_store.h"

namespace fp8lm {

enum class Scratch : uint8_t;  // nn/scratch.h

// A module's buffers for a block-scaled cast's codes and block scales (Linear::block_cast_job).
struct KeptBlockCodes {
  BackendBuffer<uint8_t>* codes = nullptr;
  BackendBuffer<uint8_t>* scales = nullptr;
  bool always = false;  // kept even where no GEMM reads them: a module's FP8 weight
};

// How the forward of a GEMM runs right now: FP8 inside an enabled autocast, else the GEMM
// precision.
Precision current_gemm_precision();
class Linear;
// Whether producers (norms, activations) may quantize straight into a GEMM's FP8 input: FP8
// with delayed scaling, whose scale is known before the data (current scaling needs the amax
// of the whole output first), for a consumer that runs in FP8.
bool fused_fp8_casts(const Linear& consumer);
// Whether producers may round straight into a BF16 GEMM's input (the consumer runs in BF16):
// the same bits as the FP32 output cast afterwards, without the FP32 tensor's write and read.
bool fused_bf16_casts(const Linear& consumer);
// Whether producers may cast straight into a block-scaled GEMM's input, a stripe of rows at a
// time (Backend::produces_block_casts): Float8BlockScaling and MXFP8, whose blocks need nothing
// of the rest of the tensor (NVFP4's global scale needs the whole tensor's amax first), for a
// consumer that runs in FP8 and collects no statistics.
bool fused_block_casts(const Linear& consumer);

class Linear {
 public:
  // Its ops run on `backend` (kernels/backend.h).
  Linear(std::string name, int64_t in, int64_t out, bool bias, Backend& backend = cpu_backend());

  // x [rows, in] -> y [rows, out] (overwritten). x must stay valid until backward (fp32 mode
  // keeps a pointer to it). With add_bias false the bias is left to a fused consumer, but its
  // gradient is still taken in backward.
  void forward(const float* x, float* y, int64_t rows, bool add_bias = true);
  // Finishes an FP8 forward whose input codes a producer wrote through begin_fp8_forward's
  // descriptor (or forward() did).
  void forward_fp8_input(float* y, int64_t rows, bool add_bias = true);
  // The same for a BF16 forward: a producer wrote the input through begin_bf16_forward's
  // buffer (or forward() cast it there).
  bf16_t* begin_bf16_forward(int64_t rows);
  void forward_bf16_input(float* y, int64_t rows, bool add_bias = true);
  // The same for a block-scaled forward: a producer cast the input through the ProducerOut
  // begin_block_forward returns (the row-wise cast, and in training the column-wise copy
  // wgrad reads), or forward_block did.
  ProducerOut begin_block_forward(int64_t rows);
  void forward_block_input(float* y, int64_t rows, bool add_bias = true);
  // Whether its block-scaled input casts can be handed to a producer (fused_block_casts).
  bool block_input_castable_by_producer() const;
  // dx += dL/dx, or dx = dL/dx when accumulate_dx is false (skipped when dx is null);
  // dW, db += their gradients.
  void backward(const float* dy, float* dx, int64_t rows, bool accumulate_dx = true);

  int64_t in_features() const { return in_; }
  Backend& backend() const { return be_; }
  MemoryUse memory_use() const {
    return {bytes_of(x16_) + bytes_of(qx_) + bytes_of(qx16_) + bytes_of(qx_t_) + bytes_of(x_col_) +
                bytes_of(x_col_codes_) + bytes_of(x_col_scales_),
            bytes_of(qw_) + bytes_of(qw16_) + bytes_of(qw_t_) + bytes_of(qw_block_scales_) +
                bytes_of(w_row_.operand) + bytes_of(w_col_.operand) + bytes_of(w_row_.codes) +
                bytes_of(w_row_.scales) + bytes_of(w_col_.codes) + bytes_of(w_col_.scales) +
                bytes_of(weight_.value16)};
  }
  int64_t out_features() const { return out_; }
  Parameter& weight() { return weight_; }
  Parameter* bias() { return has_bias_ ? &bias_ : nullptr; }
  ParameterList parameters();
  // Its FP8 scaling state: slots of GEMM `gemm` in a model's store (GPT binds every Linear to
  // one); a Linear on its own keeps a store of one GEMM.
  void bind_scaling(ScalingStore& store, int gemm);
  ScalingStore& scaling();
  // Host copies of its slots, and replacing them.
  Fp8Meta fp8_meta() { return scaling().meta(gemm_); }
  void set_fp8_meta(const Fp8Meta& m) { scaling().set_meta(gemm_, m); }
  const std::string& name() const { return name_; }
  // Starts an FP8 forward: the store is conformed to the autocast recipe (history length,
  // formats), registered for the scope's update, and the input buffer sized. Returns the
  // descriptor a producer writes the input's codes with.
  Fp8Out begin_fp8_forward(int64_t rows);

  // TE's fp8_model_init: the module's weight is its FP8 codes, re-quantized from the FP32
  // master (kept for the optimizer) only by requantize_weight(), after each optimizer step.
  void set_fp8_weights(bool on) { fp8_weights_ = on; }

  // Automatic precision fallback (beyond TE, TrainConfig::fp8_fallback): from now on this GEMM
  // runs in BF16 even inside an FP8 autocast. For the rest of the run: it is saved with the
  // model.
  void fall_back_to_bf16() { bf16_fallback_ = true; }
  bool fell_back_to_bf16() const { return bf16_fallback_; }
  // Block-scaled recipes: while on, each cast records what it did (fp8/block_stats.h) under its
  // role: input, weight, grad_output, and the column-wise copies as <role>_columnwise.
  void collect_block_stats(bool on) { collect_block_stats_ = on; }
  const std::map<std::string, BlockScaleStats>& block_stats() const { return block_stats_; }
  // The precision map (nn/precision_map.h): this GEMM runs in BF16 even inside FP8 autocast.
  void keep_in_bf16(bool on) { bf16_by_map_ = on; }
  bool kept_in_bf16() const { return bf16_by_map_; }
  // The mode its forward runs in now: the autocast's, or BF16 for a GEMM that fell back.
  Precision gemm_precision() const;
  // Diagnosis of a non-finite step: while on, an FP8 forward whose output holds NaN or Inf
  // records its place in the order such outputs appeared (across every Linear), so the first
  // can be found; -1 when none did. Turning it on clears the record.
  void watch_output(bool on);
  int64_t non_finite_output_order() const { return non_finite_order_; }
  bool fp8_weights() const { return fp8_weights_; }
  void requantize_weight(const Fp8Recipe& recipe);
  // The weight's FP8 cast as requantize_weight (or adopt_fp8_weight) left it, as host copies:
  // its codes, the scale they were cast with, its scale_inv and the amax the cast recorded in
  // its slot this step; under a block-scaled recipe also its block scales as bytes
  // (block_cast.h's layout, the cast fp8_weight_block_cast() describes) and its tensor
  // scale_inv.
  struct Fp8Weight {
    std::vector<uint8_t> codes, block_scales;
    float scale = 1, scale_inv = 1, amax = 0, tensor_scale_inv = 1;
  };
  Fp8Weight fp8_weight();
  BlockCast fp8_weight_block_cast() const;
  // Forgets the cached weight cast, so the next forward casts (and records the weight's amax)
  // as if nothing had run in between. FP8 weights (fp8_weights mode) are the weight itself. The
  // weight's BF16 copy (Parameter::value16) records nothing and stays while the weight does.
  void invalidate_weight_cast() {
    if (!fp8_weights_) cast_version_ = ~uint64_t{0};
    w_row_.version = w_col_.version = ~uint64_t{0};
  }
  // ZeRO-1's FP8 all-gather (--fp8-weights): the weight as another rank cast it from the FP32
  // master that rank alone keeps (a per-tensor recipe's codes, scale, scale_inv and amax), so
  // this rank's scaling state is the same as that rank's.
  void adopt_fp8_weight(std::span<const uint8_t> codes, float scale, float scale_inv, float amax);

 private:
  // The weight's FP8 codes for this GEMM (see qw_).
  const uint8_t* prepare_weight_fp8();
  const uint8_t* weight_fp8_for_backward();
  // The input as forward kept it for this mode's GEMMs (and the weight gradient's).
  GemmOperand saved_input();
  // The weight for the input gradient, cast (BF16, FP8 at forward's scale) as forward used it.
  GemmOperand weight_for_dgrad();
  // Quantizes x [rows, cols] through slot s by the recipe's kind of scaling, into out (from
  // begin_cast) and, where transposed is not null, its transpose (Backend::quantize_transposed).
  void cast_through_slot(Slot s, const Fp8Out& out, const float* x, int64_t rows, int64_t cols,
                         uint8_t* transposed = nullptr);
  // Keeps the weight cast's scale and scale_inv (the slot's change with every update).
  void keep_weight_scale();
  // Whether the weight slot's scale is still the one the kept cast was made with.
  bool same_weight_scale_as_cast();

  // Block-scaled recipes (block, mxfp8, nvfp4; nn/linear_block.cpp). Every operand is cast
  // from FP32 for the GEMM that reads it, blocked along that GEMM's K: x and dy row-wise for
  // forward and dgrad, column-wise for wgrad (NVFP4: after the RHT); the weight row-wise for
  // forward and column-wise for dgrad, or once in 2D blocks that serve both.
  void forward_block(const float* x, float* y, int64_t rows, bool add_bias);
  void backward_block(const float* dy, float* dx, float* dw, int64_t rows, float beta, float wbeta);
  // The cast of a [rows, cols] tensor for `role`, blocked along rows (column-wise) or along
  // cols, into operand; its tensor scale goes to *scale_inv, its codes and block scales to
  // shared scratch (the column-wise cast's own slots), or to `kept`'s buffers (sized there)
  // where the backend multiplies the codes itself (Backend::block_scaled_gemms: a later GEMM
  // reads them) or always. Where the backend multiplies them, the operand carries them.
  struct BlockCastJob {
    BlockCast cast;
    BlockCastOut out;
    BlockCodes codes;
    bool native = false;
    GemmOperand operand() const {
      return {out.operand, DType::BF16, out.tensor_scale_inv, native ? &codes : nullptr};
    }
    // What an operand of these codes carries later: nothing when not native.
    BlockCodes kept() const { return native ? codes : BlockCodes{}; }
  };
  BlockCastJob block_cast_job(BlockRole role, bool columnwise, int64_t rows, int64_t cols,
                              bf16_t* operand, float* scale_inv, KeptBlockCodes kept = {});
  // One cast run now, or a tensor's row-wise and column-wise casts in one sweep.
  GemmOperand block_operand(const BlockCastJob& job, const float* src);
  void block_operands(const BlockCastJob& row, const BlockCastJob& col, const float* src);
  // Whether the backend multiplies this recipe's codes itself (Backend::block_scaled_gemms).
  bool blocks_native() const;
  // Where a cast writes its BF16 operand of n values: null where blocks_native() (the cast
  // keeps only its codes, which the backend decodes where its GEMM declines them), else shared
  // scratch or a buffer of the module's.
  bf16_t* operand_in(Scratch slot, int64_t n);
  bf16_t* operand_in(BackendBuffer<bf16_t>& kept, int64_t n);

  Backend& be_;
  std::string name_;
  int64_t in_, out_;
  bool has_bias_;
  Parameter weight_, bias_;
  ScalingStore* store_ = nullptr;
  std::unique_ptr<ScalingStore> own_store_;
  int gemm_ = 0;
  BackendBuffer<float> amax_{be_, 1};  // current scaling: a tensor's amax

  // What forward used and saved for backward.
  Precision mode_ = Precision::Fp32;
  Fp8Recipe recipe_;
  const float* x_ = nullptr;        // fp32 mode
  BackendBuffer<bf16_t> x16_{be_};  // bf16 mode
  BackendBuffer<uint8_t> qx_{be_};  // fp8 mode: the input's codes
  // Backends whose FP8 GEMMs multiply the codes' values as BF16 (Backend::fp8_gemms_take_decoded,
  // the CPU): every cast also writes those values (Fp8Out::decoded), here for the input (kept
  // for wgrad) and in qw16_ for the weight, so no GEMM decodes codes again. 2 bytes per value
  // more, the price of decoding once per cast rather than once per GEMM.
  const bool decoded_ = be_.fp8_gemms_take_decoded() && !be_.fp8_gemms_want_tn();
  BackendBuffer<bf16_t> qx16_{be_};
  // Backends whose FP8 GEMMs want K-major operands (Backend::fp8_gemms_want_tn): the input's
  // codes transposed, [in, rows], wgrad's operand; in a training forward the only copy kept
  // (the row-wise codes, x_codes_, are then scratch). input_transposed_: qx_t_ holds this
  // forward's input.
  const bool tn_ = be_.fp8_gemms_want_tn();
  BackendBuffer<uint8_t> qx_t_{be_};
  uint8_t* x_codes_ = nullptr;  // the row-wise codes forward's GEMM reads
  bool transpose_input_ = false, input_transposed_ = false;
  // The scale_invs forward's input cast and backward's dy cast used: the slots' change with
  // the forward update between forward and backward.
  BackendBuffer<float> x_scale_inv_{be_, 1}, dy_scale_inv_{be_, 1};

  // The FP8 cast of the weight. Outside training (generation, evaluation) it is kept here and
  // reused across calls until the weight (or its scale) changes, as TE does; with fp8_weights
  // it is the weight itself. In a training step the weight changes after every step anyway,
  // so forward casts into shared scratch and backward casts again at the same scale (the same
  // codes): 1 byte per parameter less held through the step.
  BackendBuffer<uint8_t> qw_{be_};
  // On a backend that wants K-major FP8 operands, dgrad's: qw_ transposed, made at the first
  // backward after each cast into qw_ (qw_cast_ counts them) and kept while that cast is.
  BackendBuffer<uint8_t> qw_t_{be_};
  uint64_t qw_cast_ = 0, qw_t_cast_ = ~uint64_t{0};
  // qw_'s values as BF16 where decoded_, valid while qw16_cast_ is qw_cast_ (a cast that wrote
  // codes only, adopt_fp8_weight's, leaves GEMMs to decode them).
  BackendBuffer<bf16_t> qw16_{be_};
  uint64_t qw16_cast_ = ~uint64_t{0};
  // The weight operand of the codes prepare_weight_fp8 or weight_fp8_for_backward returned.
  GemmOperand weight_operand(const uint8_t* codes);
  // The input operand of codes forward_fp8_input or saved_input use (qx16_ holds their values).
  GemmOperand input_operand(const uint8_t* codes);
  bool recast_for_backward_ = false;
  BackendBuffer<float> w_scale_{be_, 1}, w_scale_inv_{be_, 1};  // the weight cast's
  uint64_t cast_version_ = ~uint64_t{0};
  uint64_t cast_generation_ = 0;  // the store's generation the kept cast was made with
  // The weight slot's scale_version at which the kept cast's scale (w_scale_) was last known to
  // be the slot's.
  uint64_t cast_scale_version_ = 0;
  bool fp8_weights_ = false;
  // Block-scaled recipes: x's column-wise operand saved for wgrad, the four tensor scales
  // (x and dy, each row-wise and column-wise), and the seed forward saw for stochastic rounding.
  BackendBuffer<bf16_t> x_col_{be_};
  // Its codes and block scales where the backend's GEMMs take them (BlockCastJob).
  BackendBuffer<uint8_t> x_col_codes_{be_}, x_col_scales_{be_};
  BlockCodes x_col_block_;
  // The input's casts begin_block_forward made, until forward_block_input's GEMM reads them.
  BlockCastJob input_row_, input_col_;
  bool input_col_made_ = false;
  BackendBuffer<float> block_scale_inv_{be_, 4};
  // The weight's operands, kept while the weight and the recipe's cast of it stay the same (a
  // training step's forward, backward and later micro-batches; every call of generation), as
  // TE keeps a weight's quantized copies across micro-batches: row-wise or 2D for forward, and
  // column-wise for dgrad where 2D blocks do not serve both. 2 bytes per parameter each.
  struct BlockWeightCast {
    explicit BlockWeightCast(Backend& be) : operand(be), scale_inv(be, 1), codes(be), scales(be) {}
    BackendBuffer<bf16_t> operand;
    BackendBuffer<float> scale_inv;
    BackendBuffer<uint8_t> codes, scales;  // where the backend's GEMMs take them (BlockCastJob)
    BlockCodes block;                      // what the operand carries: codes null where not
    uint64_t version = ~uint64_t{0};
    Fp8Recipe recipe;
  };
  BlockWeightCast w_row_{be_}, w_col_{be_};
  BackendBuffer<uint8_t> qw_block_scales_{be_};  // fp8_weights: the codes' block scales
  // The weight's operand for forward (row-wise) or dgrad (column-wise), cast when not kept.
  GemmOperand block_weight(bool columnwise);
  bool weight_blocks_2d() const;
  // dgrad's 2D-blocked weight where the backend multiplies codes: the forward cast's codes
  // transposed (w_col_.codes, K-major), once per weight version, its block scales shared.
  GemmOperand transposed_2d_weight();
  // fp8_weights under a block-scaled recipe: the forward cast into qw_ and qw_block_scales_.
  void requantize_block_weight();
  uint64_t sr_seed_ = 0;
  bool collect_block_stats_ = false;
  std::map<std::string, BlockScaleStats> block_stats_;
  bool bf16_fallback_ = false;
  bool bf16_by_map_ = false;
  bool watch_output_ = false;
  int64_t non_finite_order_ = -1;
  void record_if_non_finite(const float* y, int64_t n);
  // y = x · Wᵀ, + the bias where add_bias asks: one backend call (gemm_bias), but where a
  // watched output (an FP8 product: `watched`) is checked between the product and its bias.
  void forward_product(const GemmOperand& x, const GemmOperand& w, float* y, int64_t rows,
                       bool add_bias, bool watched);
};

}  // namespace fp8lm
