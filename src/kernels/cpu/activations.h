#pragma once
// The MLP's activations (kernels/activation_ops.h: one functor each) and the bias that precedes
// them, on the CPU: one kernel per op family over the functors, with the fused producer that
// adds the bias, applies the activation and casts to FP8 in one pass. F is the activation's
// output width; h has activation_input_width(act, F) columns ([gate | value] when gated).
// FP32 math; threads over rows; results do not depend on the thread count.
#include <cstdint>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "fp8/quantize.h"
#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cpu {

// y[r, c] += bias[c] for row-major y [rows, C].
void add_bias(float* y, const float* bias, int64_t rows, int64_t C);
// ACCUMULATES: dbias[c] += sum over rows of dy[r, c], so micro-batches add up. Where dy16 is
// not null, dy also leaves there as BF16 in the same pass (fp32_to_bf16's bits: a BF16 GEMM's
// operand).
void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C, bf16_t* dy16 = nullptr);

// h += bias (a null bias adds nothing), then y [rows, F] = act(h). h keeps the
// pre-activation the backward needs.
void bias_act_forward(float* y, float* h, const float* bias, Activation act, int64_t rows,
                      int64_t F);
// The same with y leaving as FP8 codes, cast(act(h) * scale) in format f: bit-identical to
// bias_act_forward, then fp8lm::quantize on the whole output. Where decoded is not null, the
// codes' values also go there as BF16 (casts.h's quantize_fp8).
CastStats bias_act_forward_fp8(uint8_t* y, float scale, DType f, float* h, const float* bias,
                               Activation act, int64_t rows, int64_t F, bf16_t* decoded = nullptr);
// The same with y leaving as BF16 (a BF16 GEMM's input): bit-identical to bias_act_forward,
// then fp32_to_bf16 on the whole output.
void bias_act_forward_bf16(bf16_t* y, float* h, const float* bias, Activation act, int64_t rows,
                           int64_t F);
// The same cast block-scaled as it is made (BlockProducerOut: a stripe of rows at a time, the
// bits of bias_act_forward then block_cast_pair); the rows are the casts' grid's.
void bias_act_forward_blocks(const BlockProducerOut& y, float* h, const float* bias, Activation act,
                             int64_t F);
// OVERWRITES dh = act'(h) * dy (a pointwise op owns its input gradient); dh [rows, input
// width], dy [rows, F]. dh may alias dy for an ungated activation.
void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F);
// The same with h kept in BF16 (nn/saved_activation.h), each row widened as it is read: the
// bits of bf16_to_f32 on the whole of h, then act_backward, without that FP32 copy's pass.
void act_backward(float* dh, const float* dy, const bf16_t* h, Activation act, int64_t rows,
                  int64_t F);

// The portable twins of the rows above, without ISA dispatch and without threads: each
// element as its functor computes it, the bits the CUDA kernels give. The AVX-512 rows
// (activations_isa.h) are held against these.
namespace scalar {
void act_forward(float* y, const float* h, Activation act, int64_t rows, int64_t F);
void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F);
}  // namespace scalar

namespace ref {
// The oracle: plain loops in double, no threads, written apart from the functors. Same
// contracts as above (act_forward with the bias already in h).
void add_bias(float* y, const float* bias, int64_t rows, int64_t C);
void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C);
void act_forward(float* y, const float* h, Activation act, int64_t rows, int64_t F);
void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F);
// One output in double: act(x), or act(x) * value for a gated activation (x the gate).
double act_value(Activation act, double x, double value);
}  // namespace ref

}  // namespace fp8lm::cpu
