#pragma once
// TE's Linear: y = x · Wᵀ + b with W [out, in]. The GEMM runs in FP8 inside an enabled
// Autocast (DESIGN.md §3: x and W quantized E4M3 with their slots' scales; in backward dy is
// quantized with the grad_output slot, E5M2 under HYBRID; the FP8 x is saved for dW), else in
// the GemmPrecision of the forward (bf16 or fp32). Backward uses what forward used.
#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/gemm_mode.h"
#include "fp8/scaling.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "nn/autocast.h"
#include "nn/parameter.h"

namespace fp8lm {

// How the forward of a GEMM runs right now: FP8 inside an enabled autocast, else the GEMM
// precision.
GemmMode current_gemm_mode();
// Whether producers (norms, activations) may quantize straight into a GEMM's FP8 input: FP8
// with delayed scaling, whose scale is known before the data (current scaling needs the amax
// of the whole output first).
bool fused_fp8_casts();

// A cast into FP8 through one slot: the descriptor an op writes the codes with (the slot's
// scale, its amax accumulator, counters for what the cast lost), and finish() recording the
// cast in the slot once the op has run.
struct SlotCast {
  ScalingState& slot;
  uint8_t* codes;
  unsigned long long lost[2] = {0, 0};  // saturated, flushed
  Fp8Out out() { return {codes, &slot.scale, &slot.amax_history[0], slot.format, lost, lost + 1}; }
  ProducerOut producer_out() { return ProducerOut::fp8(out()); }
  void finish(int64_t n) {
    slot.last_cast = {n, static_cast<int64_t>(lost[0]), static_cast<int64_t>(lost[1])};
  }
};

class Linear {
 public:
  // Its ops run on `backend` (kernels/backend.h).
  Linear(std::string name, int64_t in, int64_t out, bool bias, Backend& backend = cpu_backend());

  // x [rows, in] -> y [rows, out] (overwritten). x must stay valid until backward (fp32 mode
  // keeps a pointer to it). With add_bias false the bias is left to a fused consumer, but its
  // gradient is still taken in backward.
  void forward(const float* x, float* y, int64_t rows, bool add_bias = true);
  // Finishes an FP8 forward whose input codes are in begin_fp8_forward's buffer, quantized
  // with scale_inv's scale (by a fused producer, or by forward()).
  void forward_fp8_input(float scale_inv, float* y, int64_t rows, bool add_bias = true);
  // dx += dL/dx, or dx = dL/dx when accumulate_dx is false (skipped when dx is null);
  // dW, db += their gradients.
  void backward(const float* dy, float* dx, int64_t rows, bool accumulate_dx = true);

  int64_t in_features() const { return in_; }
  Backend& backend() const { return be_; }
  MemoryUse memory_use() const { return {bytes_of(x16_) + bytes_of(qx_), bytes_of(qw_)}; }
  int64_t out_features() const { return out_; }
  Parameter& weight() { return weight_; }
  Parameter* bias() { return has_bias_ ? &bias_ : nullptr; }
  ParameterList parameters();
  Fp8Meta& fp8_meta() { return meta_; }
  const Fp8Meta& fp8_meta() const { return meta_; }
  const std::string& name() const { return name_; }
  // Starts an FP8 forward: the meta is (re)built to the autocast recipe's history length and
  // formats if it differs, registered for the scope's update, and the input buffer sized.
  SlotCast begin_fp8_forward(int64_t rows);

  // TE's fp8_model_init: the module's weight is its FP8 codes, re-quantized from the FP32
  // master (kept for the optimizer) only by requantize_weight(), after each optimizer step.
  void set_fp8_weights(bool on) { fp8_weights_ = on; }
  bool fp8_weights() const { return fp8_weights_; }
  void requantize_weight(const Fp8Recipe& recipe);
  std::vector<uint8_t> fp8_weight_codes() const { return qw_.to_host(); }
  // Forgets the cached weight cast, so the next forward casts (and records the weight's amax)
  // as if nothing had run in between. FP8 weights (fp8_weights mode) are the weight itself.
  void invalidate_weight_cast() {
    if (!fp8_weights_) cast_version_ = ~uint64_t{0};
  }
  float fp8_weight_scale_inv() const { return qw_scale_inv_; }

 private:
  // The weight's FP8 codes for this GEMM (see qw_).
  const uint8_t* prepare_weight_fp8();
  const uint8_t* weight_fp8_for_backward();
  const bf16_t* weight_bf16();
  void finish_forward(float* y, int64_t rows, bool add_bias);
  // The input as forward kept it for this mode's GEMMs (and the weight gradient's).
  GemmOperand saved_input() const;
  // The weight for the input gradient, cast (BF16, FP8 at forward's scale) as forward used it.
  GemmOperand weight_for_dgrad();

  Backend& be_;
  std::string name_;
  int64_t in_, out_;
  bool has_bias_;
  Parameter weight_, bias_;
  Fp8Meta meta_;

  // What forward used and saved for backward.
  GemmMode mode_ = GemmMode::Fp32;
  Fp8Recipe recipe_;
  const float* x_ = nullptr;        // fp32 mode
  BackendBuffer<bf16_t> x16_{be_};  // bf16 mode
  BackendBuffer<uint8_t> qx_{be_};  // fp8 mode: the input's codes
  float qx_scale_inv_ = 1.0f;

  // The FP8 cast of the weight. Outside training (generation, evaluation) it is kept here and
  // reused across calls until the weight (or its scale) changes, as TE does; with fp8_weights
  // it is the weight itself. In a training step the weight changes after every step anyway,
  // so forward casts into shared scratch and backward casts again at the same scale (the same
  // codes): 1 byte per parameter less held through the step. Under BF16 GEMMs the weight is
  // rounded into shared scratch for each GEMM (weight_bf16()).
  BackendBuffer<uint8_t> qw_{be_};
  bool recast_for_backward_ = false;
  float qw_scale_inv_ = 1.0f;
  uint64_t cast_version_ = ~uint64_t{0};
  float cast_scale_ = 0.0f;
  bool fp8_weights_ = false;
};

}  // namespace fp8lm
