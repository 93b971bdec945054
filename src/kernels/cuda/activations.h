#pragma once
// Bias + activation on the device (kernels/cpu/activations.h): every activation's functor
// (kernels/activation_ops.h), FP32 math. The forward takes the GEMM output h [rows, C] (or
// [rows, 2C] for a gated one), adds the bias in place (h keeps the pre-activation for backward) and writes the
// activation as FP32, FP8 (with amax: the next GEMM's input) or BF16, in one pass.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cuda {

// h += bias (bias nullptr: none); out = act(h). C is the activation's output width (F); h
// has 2F columns for a gated activation ([gate | up], as the CPU kernel).
void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act, int64_t rows,
                      int64_t C, cudaStream_t stream);
// dh = dact(h) * dy (overwritten), for the saved pre-activation h.
void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t C, cudaStream_t stream);
// dbias[c] += sum over rows of dy[r, c].
void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C, cudaStream_t stream);
// y[r, c] += bias[c].
void add_bias(float* y, const float* bias, int64_t rows, int64_t C, cudaStream_t stream);
// y = a + b (y may alias a or b).
void add(float* y, const float* a, const float* b, int64_t n, cudaStream_t stream);
// y += x.
void accumulate(float* y, const float* x, int64_t n, cudaStream_t stream);

}  // namespace fp8lm::cuda
