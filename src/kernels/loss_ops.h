#pragma once
// Softmax cross-entropy's per-element steps, written once for the CPU kernel and the CUDA one
// (FP8LM_OP, in core/op_math.h's arithmetic); each backend does the row's reductions (the max,
// the sum of exponentials) its own way, and the exponential and logarithm with its own math
// library, so the two agree to rounding, not bit for bit.
#include "core/op_math.h"

namespace fp8lm::loss {

// The row maximum's step: a NaN never wins (it still poisons the sum, hence the loss).
FP8LM_OP float max_ignoring_nan(float m, float x) {
  return x > m ? x : m;
}

// The gradient's factor: dlogits[i] = exp(x[i] - m) * k, and grad_scale less at the target.
FP8LM_OP float gradient_factor(float grad_scale, float sum) {
  return op_math::div(grad_scale, sum);
}
FP8LM_OP float gradient(float e, float k) {
  return op_math::mul(e, k);
}
FP8LM_OP float gradient_at_target(float g, float grad_scale) {
  return op_math::sub(g, grad_scale);
}

// -log(exp(x_t - m) / sum) from log(sum): sum >= 1, so nothing overflows or underflows to -inf.
FP8LM_OP float row_loss(float log_sum, float x_target, float m) {
  return op_math::sub(log_sum, op_math::sub(x_target, m));
}

}  // namespace fp8lm::loss
