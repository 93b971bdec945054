#include "nn/linear.h"

#include "nn/fusion.h"
#include "nn/saved_activation.h"
#include "nn/scratch.h"

namespace fp8lm {
namespace {

// Quantizes x through one slot by the recipe's kind of scaling, as fp8/scaling.h's
// cast_with_recipe does on the host, over the backend's ops: delayed scaling casts with the
// slot's scale; current scaling first takes x's own amax. The slot is host memory, so this
// runs on the CPU backend until the scaling state moves into backend memory
// (docs/ARCHITECTURE.md). Returns the scale_inv to dequantize with.
float cast_through_slot(Backend& be, ScalingState& slot, const Fp8Recipe& recipe, uint8_t* codes,
                        const float* x, int64_t n) {
  if (recipe.kind == ScalingKind::Current) {
    float amax = 0.0f;
    be.absmax(&amax, x, n);
    slot.set_scale(compute_scale(amax, fp8_max(slot.format), recipe.current().margin, 1.0f));
  }
  SlotCast cast{slot, codes};
  be.quantize(cast.out(), x, n);
  cast.finish(n);
  return slot.scale_inv;
}

}  // namespace

GemmMode current_gemm_mode() {
  if (autocast_state().enabled) return GemmMode::Fp8;
  return gemm_mode(GemmPrecision::current());
}

bool fused_fp8_casts() {
  return fusion_enabled() && current_gemm_mode() == GemmMode::Fp8 &&
         autocast_state().recipe.kind == ScalingKind::Delayed;
}

Linear::Linear(std::string name, int64_t in, int64_t out, bool bias, Backend& backend)
    : be_(backend),
      name_(std::move(name)),
      in_(in),
      out_(out),
      has_bias_(bias),
      weight_(name_ + ".weight", {out, in}, /*decays=*/true, backend),
      bias_(name_ + ".bias", {bias ? out : 0}, /*decays=*/false, backend) {}

ParameterList Linear::parameters() {
  ParameterList p{&weight_};
  if (has_bias_) p.push_back(&bias_);
  return p;
}

SlotCast Linear::begin_fp8_forward(int64_t rows) {
  recipe_ = autocast_state().recipe;
  const DelayedScaling& r = recipe_.delayed;
  if (meta_[Slot::Input].amax_history.size() != static_cast<size_t>(r.amax_history_len) ||
      meta_[Slot::GradOutput].format != tensor_format(r.format, Direction::Backward)) {
    meta_ = Fp8Meta(r);
    cast_version_ = ~uint64_t{0};  // the weight's cast used the old meta
  }
  autocast_register(meta_);
  qx_.resize(static_cast<size_t>(rows * in_));
  return {meta_[Slot::Input], qx_.data()};
}

const uint8_t* Linear::prepare_weight_fp8() {
  recast_for_backward_ = false;
  if (fp8_weights_) {
    if (qw_.empty()) requantize_weight(recipe_);
    return qw_.data();
  }
  ScalingState& sw = meta_[Slot::Weight];
  const int64_t n = weight_.numel();
  if (training_forward()) {
    uint8_t* codes = scratch<uint8_t>(be_, Scratch::WeightFp8, n);
    qw_scale_inv_ = cast_through_slot(be_, sw, recipe_, codes, weight_.data(), n);
    recast_for_backward_ = true;
    cast_scale_ = sw.scale;
    cast_version_ = ~uint64_t{0};  // the kept cast (if any) is not what this step used
    return codes;
  }
  // Reused across micro-batches while neither the weight nor its delayed scale changed;
  // current scaling derives its scale from the weight itself, so the version alone decides.
  const bool fresh = cast_version_ == weight_.version &&
                     (recipe_.kind == ScalingKind::Current || cast_scale_ == sw.scale);
  if (!fresh) requantize_weight(recipe_);
  return qw_.data();
}

const uint8_t* Linear::weight_fp8_for_backward() {
  if (!recast_for_backward_) return qw_.data();
  // Forward's codes again: the same master weight at the same scale. A plain quantize, so the
  // slot's amax history records the weight once per step, as with a kept cast.
  const int64_t n = weight_.numel();
  uint8_t* codes = scratch<uint8_t>(be_, Scratch::WeightFp8, n);
  be_.quantize({codes, &cast_scale_, nullptr, meta_[Slot::Weight].format}, weight_.data(), n);
  return codes;
}

const bf16_t* Linear::weight_bf16() {
  // Not cached per layer: 2 bytes per parameter held through the step would cost more memory
  // than BF16 activations save; rounding again for the backward GEMM is one cheap pass.
  const int64_t n = weight_.numel();
  bf16_t* w = scratch<bf16_t>(be_, Scratch::WeightBf16, n);
  be_.fp32_to_bf16(w, weight_.data(), n);
  return w;
}

void Linear::requantize_weight(const Fp8Recipe& recipe) {
  const int64_t n = weight_.numel();
  qw_.resize(static_cast<size_t>(n));
  qw_scale_inv_ =
      cast_through_slot(be_, meta_[Slot::Weight], recipe, qw_.data(), weight_.data(), n);
  cast_version_ = weight_.version;
  cast_scale_ = meta_[Slot::Weight].scale;
}

void Linear::forward(const float* x, float* y, int64_t rows, bool add_bias) {
  mode_ = current_gemm_mode();
  if (mode_ == GemmMode::Fp8) {
    SlotCast in = begin_fp8_forward(rows);
    const float sinv = cast_through_slot(be_, in.slot, recipe_, in.codes, x, rows * in_);
    forward_fp8_input(sinv, y, rows, add_bias);
    return;
  }
  GemmOperand w;
  if (mode_ == GemmMode::Bf16) {
    x16_.resize(static_cast<size_t>(rows * in_));
    be_.fp32_to_bf16(x16_.data(), x, rows * in_);
    w = {weight_bf16(), DType::BF16};
  } else {
    x_ = x;
    w = {weight_.data(), DType::F32};
  }
  be_.gemm(Trans::N, Trans::T, rows, out_, in_, 1.0f, saved_input(), w, 0.0f, y);
  finish_forward(y, rows, add_bias);
}

void Linear::forward_fp8_input(float scale_inv, float* y, int64_t rows, bool add_bias) {
  mode_ = GemmMode::Fp8;
  qx_scale_inv_ = scale_inv;
  const uint8_t* qw = prepare_weight_fp8();
  // The input codes are what backward's weight gradient uses: one byte per value saved.
  const GemmOperand w{qw, fp8_dtype(meta_[Slot::Weight].format), &qw_scale_inv_};
  be_.gemm(Trans::N, Trans::T, rows, out_, in_, 1.0f, saved_input(), w, 0.0f, y);
  finish_forward(y, rows, add_bias);
}

GemmOperand Linear::weight_for_dgrad() {
  switch (mode_) {
    case GemmMode::Bf16:
      return {weight_bf16(), DType::BF16};
    case GemmMode::Fp8:
      return {weight_fp8_for_backward(), fp8_dtype(meta_[Slot::Weight].format), &qw_scale_inv_};
    case GemmMode::Fp32:
      break;
  }
  return {weight_.data(), DType::F32};
}

GemmOperand Linear::saved_input() const {
  switch (mode_) {
    case GemmMode::Bf16:
      return {x16_.data(), DType::BF16};
    case GemmMode::Fp8:
      return {qx_.data(), fp8_dtype(meta_[Slot::Input].format), &qx_scale_inv_};
    case GemmMode::Fp32:
      break;
  }
  return {x_, DType::F32};
}

void Linear::finish_forward(float* y, int64_t rows, bool add_bias) {
  if (has_bias_ && add_bias) {
    be_.add_bias(y, bias_.data(), rows, out_);
  }
}

void Linear::backward(const float* dy, float* dx, int64_t rows, bool accumulate_dx) {
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  if (has_bias_) {
    be_.bias_backward(bias_.grad.data(), dy, rows, out_);
  }
  // A BF16 gradient (--fp8-weights) takes the GEMM's FP32 result from scratch.
  const bool bf16_grad = weight_.bf16_grad();
  float* dw =
      bf16_grad ? scratch<float>(be_, Scratch::WeightGrad, out_ * in_) : weight_.grad.data();
  const float wbeta = bf16_grad ? 0.0f : 1.0f;
  // dy as this mode's GEMMs take it.
  GemmOperand g;
  float dy_sinv = 1.0f;
  switch (mode_) {
    case GemmMode::Fp32:
      g = {dy, DType::F32};
      break;
    case GemmMode::Bf16: {
      bf16_t* dy16 = scratch<bf16_t>(be_, Scratch::LinearDy, rows * out_);
      be_.fp32_to_bf16(dy16, dy, rows * out_);
      g = {dy16, DType::BF16};
      break;
    }
    case GemmMode::Fp8: {
      ScalingState& sdy = meta_[Slot::GradOutput];
      uint8_t* qdy = scratch<uint8_t>(be_, Scratch::LinearDy, rows * out_);
      dy_sinv = cast_through_slot(be_, sdy, recipe_, qdy, dy, rows * out_);
      g = {qdy, fp8_dtype(sdy.format), &dy_sinv};
      break;
    }
  }
  if (dx) be_.gemm(Trans::N, Trans::N, rows, in_, out_, 1.0f, g, weight_for_dgrad(), beta, dx);
  be_.gemm(Trans::T, Trans::N, out_, in_, rows, 1.0f, g, saved_input(), wbeta, dw);
  if (bf16_grad) {
    be_.accumulate_into_bf16(weight_.grad16.data(), dw, out_ * in_);
  }
}

}  // namespace fp8lm
