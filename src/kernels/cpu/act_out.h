#pragma once
// The activations' entries every backend shares (kernels/cuda/activations.h takes the same
// arguments over device memory, plus a stream): h += bias, then act(h) written as the
// ProducerOut asks (FP32, FP8 codes with their statistics accumulated, or BF16). Without a bias
// the plain activation runs (the unfused twin, after a GEMM that added the bias itself). They
// call the kernels of activations.h, so they give those kernels' bits.
#include <cstdint>

#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cpu {

// F is the activation's output width; h has 2F columns for SwiGLU ([gate | up]).
void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act, int64_t rows,
                      int64_t F);
// dh = act'(h) * dy, overwritten.
void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F);

}  // namespace fp8lm::cpu
