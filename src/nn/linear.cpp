#include "nn/linear.h"

#include "core/finite.h"

#include "nn/fusion.h"
#include "nn/micro_batch.h"
#include "nn/saved_activation.h"
#include "nn/scratch.h"

namespace fp8lm {

Precision current_gemm_precision() {
  if (autocast_state().enabled) return Precision::Fp8;
  return GemmPrecision::current();
}

bool fused_fp8_casts(const Linear& consumer) {
  return fusion_enabled() && consumer.gemm_precision() == Precision::Fp8 &&
         autocast_state().recipe.kind == ScalingKind::Delayed;
}

bool fused_bf16_casts(const Linear& consumer) {
  return fusion_enabled() && consumer.gemm_precision() == Precision::Bf16;
}

Precision Linear::gemm_precision() const {
  const Precision m = current_gemm_precision();
  return m == Precision::Fp8 && (bf16_fallback_ || bf16_by_map_) ? Precision::Bf16 : m;
}

namespace {
int64_t g_non_finite_outputs = 0;  // the order of watched non-finite outputs
}  // namespace

void Linear::watch_output(bool on) {
  watch_output_ = on;
  if (on) non_finite_order_ = -1;
}

void Linear::record_if_non_finite(const float* y, int64_t n) {
  if (!watch_output_ || non_finite_order_ >= 0) return;
  std::vector<float> host(static_cast<size_t>(n));  // the diagnosis only: a rare, slow path
  be_.download(host.data(), y, host.size() * sizeof(float));
  if (!all_finite(host)) non_finite_order_ = g_non_finite_outputs++;
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

void Linear::bind_scaling(ScalingStore& store, int gemm) {
  store_ = &store;
  gemm_ = gemm;
  own_store_.reset();
}

ScalingStore& Linear::scaling() {
  if (!store_) {
    // TE's default before any FP8 forward: HYBRID, a history of one.
    DelayedScaling r;
    r.amax_history_len = 1;
    own_store_ = std::make_unique<ScalingStore>(be_, 1, r);
    store_ = own_store_.get();
    gemm_ = 0;
  }
  return *store_;
}

void Linear::cast_through_slot(Slot s, const Fp8Out& out, const float* x, int64_t rows,
                               int64_t cols, uint8_t* transposed) {
  // Delayed scaling casts with the slot's scale; current scaling first sets it from x's own
  // amax (fp8/scaling.h's cast_current_scaling).
  const int64_t n = rows * cols;
  if (recipe_.kind == ScalingKind::Current) {
    amax_.zero();
    be_.absmax(amax_.data(), x, n);
    scaling().scale_from_amax(gemm_, s, amax_.data(), recipe_.current());
  }
  if (transposed) return be_.quantize_transposed(out, transposed, x, rows, cols);
  be_.quantize(out, x, n);
}

Fp8Out Linear::begin_fp8_forward(int64_t rows) {
  recipe_ = autocast_state().recipe;
  ScalingStore& store = scaling();
  store.conform(recipe_.delayed);
  autocast_register(store);
  const int64_t n = rows * in_;
  // On a backend whose FP8 GEMMs want K-major operands, a training forward keeps only the
  // transposed codes wgrad reads (qx_t_, made here, TE's columnwise usage): the row-wise ones
  // serve this forward's GEMM alone, from scratch.
  transpose_input_ = tn_ && training_forward();
  input_transposed_ = false;
  if (transpose_input_) {
    x_codes_ = scratch<uint8_t>(be_, Scratch::InputFp8, n);
    qx_t_.resize(static_cast<size_t>(n));
  } else {
    qx_.resize(static_cast<size_t>(n));
    x_codes_ = qx_.data();
  }
  Fp8Out out = store.begin_cast(gemm_, Slot::Input, x_codes_, n);
  if (decoded_) {
    qx16_.resize(static_cast<size_t>(n));
    out.decoded = qx16_.data();
  }
  return out;
}

bool Linear::same_weight_scale_as_cast() {
  // The slot's scale version says the scale has not moved since the cast without reading it
  // (issue 34: a read makes the host wait for the device, at every generated token otherwise);
  // only after an update are the two scales read and compared, once.
  ScalingStore& store = scaling();
  const uint64_t now = store.scale_version(gemm_, Slot::Weight);
  if (cast_scale_version_ == now) return true;
  float cast = 0.0f, slot = 0.0f;
  be_.download(&cast, w_scale_.data(), sizeof(float));
  be_.download(&slot, store.scale(gemm_, Slot::Weight), sizeof(float));
  if (cast != slot) return false;
  cast_scale_version_ = now;
  return true;
}

void Linear::keep_weight_scale() {
  ScalingStore& store = scaling();
  be_.copy(w_scale_.data(), store.scale(gemm_, Slot::Weight), sizeof(float));
  be_.copy(w_scale_inv_.data(), store.scale_inv(gemm_, Slot::Weight), sizeof(float));
}

const uint8_t* Linear::prepare_weight_fp8() {
  recast_for_backward_ = false;
  if (fp8_weights_) {
    if (qw_.empty()) requantize_weight(recipe_);
    return qw_.data();
  }
  ScalingStore& store = scaling();
  const int64_t n = weight_.numel();
  const MicroBatch micro = current_micro_batch();
  if (training_forward() && micro != MicroBatch::Only) {
    // Accumulating: the first micro-batch's cast is kept (1 byte per parameter through the
    // step) and the later ones use it at the scale it was made with, as TE does. A weight
    // changed or a store rebuilt since then (not within a step) casts again.
    const bool kept = cast_version_ == weight_.version && cast_generation_ == store.generation();
    if (micro == MicroBatch::First || !kept) requantize_weight(recipe_);
    return qw_.data();
  }
  if (training_forward() && decoded_) {
    // Where GEMMs take decoded values, the cast (codes and values) is kept for dgrad, which
    // would otherwise decode a second cast again. A forward outside training casts anew, as
    // below.
    requantize_weight(recipe_);
    cast_version_ = ~uint64_t{0};
    return qw_.data();
  }
  if (training_forward()) {
    uint8_t* codes = scratch<uint8_t>(be_, Scratch::WeightFp8, n);
    cast_through_slot(Slot::Weight, store.begin_cast(gemm_, Slot::Weight, codes, n), weight_.data(),
                      out_, in_);
    keep_weight_scale();
    recast_for_backward_ = true;
    cast_version_ = ~uint64_t{0};  // the kept cast (if any) is not what this step used
    return codes;
  }
  // Reused across micro-batches (and generated tokens) while neither the weight nor its
  // delayed scale changed; current scaling derives its scale from the weight itself, so the
  // version alone decides.
  const bool fresh = cast_version_ == weight_.version && cast_generation_ == store.generation() &&
                     (recipe_.kind == ScalingKind::Current || same_weight_scale_as_cast());
  if (!fresh) requantize_weight(recipe_);
  return qw_.data();
}

const uint8_t* Linear::weight_fp8_for_backward() {
  const int64_t n = weight_.numel();
  if (!recast_for_backward_) {
    if (!tn_) return qw_.data();
    // The kept cast's codes as dgrad's K-major operand [in, out]: transposed once per cast
    // (per weight version), not per micro-batch.
    if (qw_t_cast_ != qw_cast_) {
      qw_t_.resize(static_cast<size_t>(n));
      be_.transpose_fp8(qw_t_.data(), qw_.data(), out_, in_);
      qw_t_cast_ = qw_cast_;
    }
    return qw_t_.data();
  }
  // Forward's codes again: the same master weight at the same scale, straight into dgrad's
  // layout. No amax, so the slot's history records the weight once per step, as with a kept
  // cast.
  uint8_t* codes = scratch<uint8_t>(be_, Scratch::WeightFp8, n);
  const DType format = scaling().format(gemm_, Slot::Weight);
  if (tn_) {
    be_.quantize_transposed({nullptr, w_scale_.data(), nullptr, format}, codes, weight_.data(),
                            out_, in_);
  } else {
    be_.quantize({codes, w_scale_.data(), nullptr, format}, weight_.data(), n);
  }
  return codes;
}

void Linear::requantize_weight(const Fp8Recipe& recipe) {
  recipe_ = recipe;
  if (recipe.block_scaled()) return requantize_block_weight();
  ScalingStore& store = scaling();
  const int64_t n = weight_.numel();
  qw_.resize(static_cast<size_t>(n));
  Fp8Out out = store.begin_cast(gemm_, Slot::Weight, qw_.data(), n);
  if (decoded_) {
    qw16_.resize(static_cast<size_t>(n));
    out.decoded = qw16_.data();
  }
  cast_through_slot(Slot::Weight, out, weight_.data(), out_, in_);
  ++qw_cast_;
  if (decoded_) qw16_cast_ = qw_cast_;
  keep_weight_scale();
  cast_version_ = weight_.version;
  cast_generation_ = store.generation();
  cast_scale_version_ = store.scale_version(gemm_, Slot::Weight);
}

Linear::Fp8Weight Linear::fp8_weight() {
  Fp8Weight w{
      qw_.to_host(), qw_block_scales_.to_host(),   w_scale_.to_host()[0], w_scale_inv_.to_host()[0],
      0.0f,          w_row_.scale_inv.to_host()[0]};
  be_.download(&w.amax, scaling().amax(gemm_, Slot::Weight), sizeof(float));
  return w;
}

void Linear::adopt_fp8_weight(std::span<const uint8_t> codes, float scale, float scale_inv,
                              float amax) {
  be_.upload(scaling().amax(gemm_, Slot::Weight), &amax, sizeof(float));
  qw_.resize(codes.size());
  qw_.upload_bytes(codes, name_ + ".weight (FP8)");
  ++qw_cast_;
  w_scale_.upload({scale}, name_ + ".weight scale");
  w_scale_inv_.upload({scale_inv}, name_ + ".weight scale_inv");
  cast_version_ = weight_.version;
  cast_generation_ = scaling().generation();
  cast_scale_version_ = scaling().scale_version(gemm_, Slot::Weight);
}

void Linear::forward(const float* x, float* y, int64_t rows, bool add_bias) {
  mode_ = gemm_precision();
  if (mode_ == Precision::Fp8 && autocast_state().recipe.block_scaled()) {
    recipe_ = autocast_state().recipe;
    return forward_block(x, y, rows, add_bias);
  }
  if (mode_ == Precision::Fp8) {
    const Fp8Out out = begin_fp8_forward(rows);
    uint8_t* transposed = transpose_input_ ? qx_t_.data() : nullptr;
    cast_through_slot(Slot::Input, out, x, rows, in_, transposed);
    input_transposed_ = transposed != nullptr;
    forward_fp8_input(y, rows, add_bias);
    return;
  }
  if (mode_ == Precision::Bf16) {
    be_.fp32_to_bf16(begin_bf16_forward(rows), x, rows * in_);
    forward_bf16_input(y, rows, add_bias);
    return;
  }
  x_ = x;
  forward_product(saved_input(), {weight_.data(), DType::F32}, y, rows, add_bias, false);
}

void Linear::forward_product(const GemmOperand& x, const GemmOperand& w, float* y, int64_t rows,
                             bool add_bias, bool watched) {
  const bool bias = has_bias_ && add_bias;
  if (bias && !(watched && watch_output_)) {
    be_.gemm_bias(Trans::N, Trans::T, rows, out_, in_, 1.0f, x, w, bias_.data(), y);
    return;
  }
  be_.gemm(Trans::N, Trans::T, rows, out_, in_, 1.0f, x, w, 0.0f, y);
  if (watched) record_if_non_finite(y, rows * out_);
  if (bias) be_.add_bias(y, bias_.data(), rows, out_);
}

bf16_t* Linear::begin_bf16_forward(int64_t rows) {
  x16_.resize(static_cast<size_t>(rows * in_));
  return x16_.data();
}

void Linear::forward_bf16_input(float* y, int64_t rows, bool add_bias) {
  mode_ = Precision::Bf16;
  forward_product(saved_input(), {weight_.bf16_value(), DType::BF16}, y, rows, add_bias, false);
}

void Linear::forward_fp8_input(float* y, int64_t rows, bool add_bias) {
  mode_ = Precision::Fp8;
  ScalingStore& store = scaling();
  be_.copy(x_scale_inv_.data(), store.scale_inv(gemm_, Slot::Input), sizeof(float));
  const uint8_t* qw = prepare_weight_fp8();
  // The input codes (or their transpose) are what backward's weight gradient uses: one byte
  // per value saved. A producer wrote them row-wise only.
  if (transpose_input_ && !input_transposed_) {
    be_.transpose_fp8(qx_t_.data(), x_codes_, rows, in_);
    input_transposed_ = true;
  }
  forward_product(input_operand(x_codes_), weight_operand(qw), y, rows, add_bias, true);
}

GemmOperand Linear::weight_operand(const uint8_t* codes) {
  GemmOperand w{codes, scaling().format(gemm_, Slot::Weight), w_scale_inv_.data()};
  if (codes == qw_.data() && qw16_cast_ == qw_cast_) w.decoded = qw16_.data();
  return w;
}

GemmOperand Linear::input_operand(const uint8_t* codes) {
  GemmOperand x{codes, scaling().format(gemm_, Slot::Input), x_scale_inv_.data()};
  if (decoded_) x.decoded = qx16_.data();
  return x;
}

GemmOperand Linear::weight_for_dgrad() {
  if (mode_ == Precision::Bf16) return {weight_.bf16_value(), DType::BF16};
  if (mode_ == Precision::Fp8) return weight_operand(weight_fp8_for_backward());
  return {weight_.data(), DType::F32};
}

GemmOperand Linear::saved_input() {
  if (mode_ == Precision::Bf16) return {x16_.data(), DType::BF16};
  if (mode_ == Precision::Fp8) return input_operand(input_transposed_ ? qx_t_.data() : qx_.data());
  return {x_, DType::F32};
}

void Linear::backward(const float* dy, float* dx, int64_t rows, bool accumulate_dx) {
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  // Under BF16 GEMMs dy leaves as their operand in the pass that sums the bias gradient.
  bf16_t* dy16 =
      mode_ == Precision::Bf16 ? scratch<bf16_t>(be_, Scratch::LinearDy, rows * out_) : nullptr;
  if (has_bias_ && dy16) {
    be_.bias_backward_bf16(bias_.grad.data(), dy16, dy, rows, out_);
  } else if (has_bias_) {
    be_.bias_backward(bias_.grad.data(), dy, rows, out_);
  } else if (dy16) {
    be_.fp32_to_bf16(dy16, dy, rows * out_);
  }
  // A BF16 gradient (--fp8-weights) takes the GEMM's FP32 result from scratch.
  const bool bf16_grad = weight_.bf16_grad();
  float* dw =
      bf16_grad ? scratch<float>(be_, Scratch::WeightGrad, out_ * in_) : weight_.grad.data();
  const float wbeta = bf16_grad ? 0.0f : 1.0f;
  if (mode_ == Precision::Fp8 && recipe_.block_scaled()) {
    backward_block(dy, dx, dw, rows, beta, wbeta);
    if (bf16_grad) be_.accumulate_into_bf16(weight_.grad16.data(), dw, out_ * in_);
    return;
  }
  // FP8 GEMMs in the one layout the backend takes without copies (issue 34): dgrad against
  // the weight's transposed codes, wgrad on dy's and x's, each transposed once (TE's
  // cast_transpose: dy's in the same kernel as its cast).
  const bool tn = mode_ == Precision::Fp8 && tn_;
  if (tn && !input_transposed_) {  // a forward outside training kept row-wise codes only
    qx_t_.resize(static_cast<size_t>(rows * in_));
    be_.transpose_fp8(qx_t_.data(), qx_.data(), rows, in_);
    input_transposed_ = true;
  }
  // dy as this mode's GEMMs take it: g for dgrad, gw for wgrad.
  GemmOperand g{dy, DType::F32};
  if (dy16) g = {dy16, DType::BF16};
  GemmOperand gw = g;
  if (mode_ == Precision::Fp8) {
    ScalingStore& store = scaling();
    uint8_t* qdy = dx || !tn ? scratch<uint8_t>(be_, Scratch::LinearDy, rows * out_) : nullptr;
    uint8_t* qdy_t = tn ? scratch<uint8_t>(be_, Scratch::LinearDyT, rows * out_) : nullptr;
    Fp8Out q = store.begin_cast(gemm_, Slot::GradOutput, qdy, rows * out_);
    if (decoded_) q.decoded = scratch<bf16_t>(be_, Scratch::LinearDyBf16, rows * out_);
    cast_through_slot(Slot::GradOutput, q, dy, rows, out_, qdy_t);
    be_.copy(dy_scale_inv_.data(), store.scale_inv(gemm_, Slot::GradOutput), sizeof(float));
    const DType format = store.format(gemm_, Slot::GradOutput);
    g = {qdy, format, dy_scale_inv_.data(), nullptr, q.decoded};
    gw = {tn ? qdy_t : qdy, format, dy_scale_inv_.data(), nullptr, q.decoded};
  }
  if (dx) {
    be_.gemm(Trans::N, tn ? Trans::T : Trans::N, rows, in_, out_, 1.0f, g, weight_for_dgrad(), beta,
             dx);
  }
  // dW = dyᵀ · x: with dyᵀ and xᵀ stored (tn), the same product of K-major operands.
  be_.gemm(tn ? Trans::N : Trans::T, tn ? Trans::T : Trans::N, out_, in_, rows, 1.0f, gw,
           saved_input(), wbeta, dw);
  if (bf16_grad) be_.accumulate_into_bf16(weight_.grad16.data(), dw, out_ * in_);
}

}  // namespace fp8lm
