#pragma once
// The optimizer's device kernels, each one launch over every parameter (TE's multi-tensor
// apply): the global gradient norm and AdamW with clipping folded in. The update is
// kernels/adamw_ops.h's, in FP32, as on the CPU; FP8 weights are cast again by their Linear
// after the step. Gradients are FP32 only: the CPU's BF16 gradients of --fp8-weights
// (AdamWTensor::grad16) have no device path; the device model keeps FP32 gradients.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace fp8lm::cuda {

using fp8lm::AdamWHyper;  // kernels/tensor.h
using fp8lm::AdamWTensor;

// *norm = sqrt(sum of squares of every grad), overwritten; partial sums in double over fixed
// chunks, added in a fixed order (the same bits every run). *clip (optional) = max_norm /
// (norm + 1e-6) when norm > max_norm > 0, else 1 (adamw::clip_factor). scratch: device memory
// of grad_norm_scratch_bytes(total_elements) for the partial sums, the caller's to keep, so that
// a graph captured from the call keeps valid addresses.
size_t grad_norm_scratch_bytes(int64_t total_elements);
void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* tensors, int n_tensors,
               int64_t total_elements, void* scratch, cudaStream_t stream);

// Every tensor: g = grad * *grad_scale (grad_scale nullptr: 1); AdamW as on the CPU, the same
// bits, and each new param's BF16 copy where the entry has one (AdamWTensor::param16); with a
// decision (optional), nothing when it skips (adamw::with_decision). tensors: a
// device array of n_tensors entries; total_elements: the sum of their n (it sizes the launch).
void adamw_step(const AdamWTensor* tensors, int n_tensors, int64_t total_elements,
                const AdamWHyper& h, const float* grad_scale, const StepDecision* decision,
                cudaStream_t stream);

}  // namespace fp8lm::cuda
