#pragma once
// AdamW's update of one element and gradient clipping's factor, written once in op_math's
// arithmetic for the CPU's optimizer (kernels/cpu/optimizer.cpp) and the CUDA one
// (kernels/cuda/optimizer.cu), which therefore give the same bits.
#include "core/op_math.h"
#include "kernels/tensor.h"

namespace fp8lm::adamw {

namespace m = op_math;

// g (the gradient, times the step's scale) moves the moments mo, v and the weight w; decay is
// the tensor's weight decay (0: none), applied to w as AdamW decouples it.
FP8LM_OP void update(float& w, float& mo, float& v, float g, const AdamWHyper& h, float decay) {
  mo = m::add(m::mul(h.beta1, mo), m::mul(m::sub(1.0f, h.beta1), g));
  v = m::add(m::mul(h.beta2, v), m::mul(m::mul(m::sub(1.0f, h.beta2), g), g));
  const float step = m::div(m::div(mo, h.bc1), m::add(m::sqrt(m::div(v, h.bc2)), h.eps));
  w = m::sub(w, m::mul(h.lr, m::add(step, m::mul(decay, w))));
}

// What brings a gradient of this global norm down to max_norm: 1 when it is within, or when
// max_norm <= 0 turns clipping off.
FP8LM_OP float clip_factor(float norm, float max_norm) {
  return max_norm > 0.0f && norm > max_norm ? m::div(max_norm, m::add(norm, 1e-6f)) : 1.0f;
}

FP8LM_OP bool finite(float x) {
  return (m::bits(x) & 0x7f800000u) != 0x7f800000u;
}

// The step's decision once every loss and the norm were looked at (all_finite): a skipped step
// keeps the count; a taken one counts itself and takes its bias corrections from the host's
// table (bias_corrections[2t], [2t + 1] for step t: the host's std::pow bits on every backend).
FP8LM_OP void decide(StepDecision& d, bool all_finite, const float* bias_corrections) {
  d.skip = all_finite ? 0 : 1;
  if (!all_finite) return;
  d.steps += 1;
  d.bc1 = bias_corrections[2 * d.steps];
  d.bc2 = bias_corrections[2 * d.steps + 1];
}

// The hyper-parameters a decided step runs with.
FP8LM_OP AdamWHyper with_decision(AdamWHyper h, const StepDecision* d) {
  if (d != nullptr) {
    h.bc1 = d->bc1;
    h.bc2 = d->bc2;
  }
  return h;
}

}  // namespace fp8lm::adamw
