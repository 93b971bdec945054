#pragma once
// The optimizer on the CPU, the CPU backend's grad_norm and adamw_step (kernels/backend.h) over
// a table of tensors in host memory. Each tensor is cut into chunks of fixed size, the threads'
// unit of work: the norm adds one double partial per chunk, in chunk order, and the update is
// element-wise (kernels/adamw_ops.h), so the bits do not depend on the thread count. A
// tensor's gradient is FP32 (grad) or BF16 (grad16, --fp8-weights).

#include "kernels/tensor.h"

namespace fp8lm::cpu {

// *norm = sqrt(sum of squares of every gradient); *clip (optional) = its clipping factor for
// max_norm (adamw::clip_factor).
void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* table, int n);
// AdamW on every tensor, each gradient times grad_scale as it is read; with a decision
// (optional), nothing when it skips (adamw::with_decision).
void adamw_step(const AdamWTensor* table, int n, const AdamWHyper& h, float grad_scale,
                const StepDecision* decision);
// The step's decision from its row losses and norm (adamw::decide).
void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                 const float* bias_corrections);

}  // namespace fp8lm::cpu
