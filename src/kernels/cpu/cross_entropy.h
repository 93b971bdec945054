#pragma once
// The loss: softmax and cross-entropy fused, so the [rows, V] probabilities are never stored
// (only recomputed into dlogits when a gradient is wanted). FP32 math; threads over rows;
// results do not depend on the thread count.
#include <cstdint>

namespace fp8lm::cpu {

// logits [rows, V] row-major; targets [rows], where a target < 0 means "ignore this row": no
// loss and a zero gradient. losses [rows] (may be nullptr) receives each row's
// -log softmax(logits)[target] (0 for ignored rows). Returns the mean loss over the rows not
// ignored (0 if all are), summed in row order so it is deterministic.
// When dlogits is not nullptr it is OVERWRITTEN with (softmax - onehot(target)) * grad_scale
// (zero on ignored rows); it may alias logits, as each row is read fully before it is written.
// Numerically stable: the row max is subtracted before exponentiating.
// Throws fp8lm::Error if a target is >= V (before touching any output).
float softmax_cross_entropy(float* dlogits, float* losses, const float* logits,
                            const int32_t* targets, int64_t rows, int64_t V, float grad_scale);

// The unfused twin (--no-fusion), as frameworks without a fused loss run it: softmax into probs
// [rows, V] (stored), then the loss read from probs, then dlogits (required here) from probs.
// Three passes over [rows, V] instead of one; the same contract otherwise, with the loss taken
// as -log(probs[target]) (so probs underflowing to 0 gives +inf where the fused loss is finite).
float softmax_cross_entropy_unfused(float* dlogits, float* probs, const float* logits,
                                    const int32_t* targets, int64_t rows, int64_t V,
                                    float grad_scale);

namespace ref {
// The oracle: plain loops, double precision, no threads. Same contract.
float softmax_cross_entropy(float* dlogits, float* losses, const float* logits,
                            const int32_t* targets, int64_t rows, int64_t V, float grad_scale);
}  // namespace ref

}  // namespace fp8lm::cpu
