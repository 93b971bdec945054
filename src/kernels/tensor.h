#pragma once
// How tensors travel into every backend's kernels, as in TE's NVTETensor: a GEMM operand is
// its data, its dtype and (FP8) a pointer to its scale_inv; a quantized output carries its
// codes with the scale the producer multiplies by, the amax it max-accumulates and the
// saturated/flushed counters. Pointers are in the backend's memory (host for the CPU, device
// for CUDA), so a GPU step never waits on the host for a scale.
#include <cstdint>

#include "core/bf16.h"
#include "core/dtype.h"

namespace fp8lm {

struct BlockCodes;    // fp8/block_cast.h
struct BlockCast;     // fp8/block_cast.h
struct BlockCastOut;  // fp8/block_cast.h

struct GemmOperand {
  const void* data = nullptr;
  DType type = DType::F32;  // F32, BF16, E4M3 or E5M2
  // FP8: the value is code * *scale_inv. BF16: when set, the output is multiplied by it (a
  // block-scaled operand's tensor scale, fp8/block_cast.h).
  const float* scale_inv = nullptr;
  // A block-scaled BF16 operand's codes and block scales, set where the backend multiplies
  // them itself (Backend::block_scaled_gemms). data is then the exact decoded operand or null
  // (the cast kept only the codes, as TE does): where its block-scaled GEMM cannot take a
  // call, the backend multiplies data, decoding it first where null.
  const BlockCodes* block = nullptr;
  // FP8, optional: each code's value as BF16, as the cast wrote it beside the codes
  // (Fp8Out::decoded) for a backend whose FP8 GEMMs multiply BF16 values.
  const bf16_t* decoded = nullptr;
};

struct Fp8Out {
  uint8_t* data = nullptr;       // codes, row-major like the FP32 tensor they encode
  const float* scale = nullptr;  // q = cast(x * *scale), saturating (satfinite)
  float* amax = nullptr;         // max-accumulated with max|x| of the unscaled input
  DType format = DType::E4M3;
  // Optional counters (nullptr: not counted), added to: values whose |x * scale| rounded past
  // the format's max or were ±Inf, and non-zero values that became ±0 (CastStats).
  unsigned long long* saturated = nullptr;
  unsigned long long* flushed = nullptr;
  // Optional (Backend::fp8_gemms_take_decoded): each code's value also written here as BF16
  // (exact: every E4M3 and E5M2 value is a BF16 value), so the GEMMs reading these codes do not
  // decode them again on every call.
  bf16_t* decoded = nullptr;
};

// A producer's output cast block-scaled as it is made (fp8/block_cast.h's
// block_cast_produced, host memory only): row's cast, and col's where col is not null.
struct BlockProducerOut {
  const BlockCast* row = nullptr;
  const BlockCastOut* row_out = nullptr;
  const BlockCast* col = nullptr;
  const BlockCastOut* col_out = nullptr;
};

// Where a producer (a norm, an activation) writes: exactly one of FP32 values, FP8 codes with
// their statistics, BF16 values, or (the CPU's, Backend::produces_block_casts) block-scaled
// operands. As in TE, the output's dtype decides whether the cast is fused into the producer.
struct ProducerOut {
  float* y = nullptr;
  Fp8Out y8;  // y8.data != nullptr selects FP8
  bf16_t* y16 = nullptr;
  BlockProducerOut blocks;  // blocks.row != nullptr selects block-scaled casts

  static ProducerOut fp32(float* y) {
    ProducerOut o;
    o.y = y;
    return o;
  }
  static ProducerOut fp8(const Fp8Out& q) {
    ProducerOut o;
    o.y8 = q;
    return o;
  }
  static ProducerOut bf16(bf16_t* y) {
    ProducerOut o;
    o.y16 = y;
    return o;
  }
  static ProducerOut block_scaled(const BlockProducerOut& b) {
    ProducerOut o;
    o.blocks = b;
    return o;
  }
};

// Every FP8 slot's scaling state as structure-of-arrays (TE's fp8_meta tensors), in a
// backend's memory: slot i's amax history is amax_history[i*H, i*H + H), [0] accumulating
// this step's amax; fp8_max is the largest finite value of its format.
struct ScalingSlots {
  float* amax_history = nullptr;   // [n, H]
  float* scale = nullptr;          // [n]
  float* scale_inv = nullptr;      // [n]
  const float* fp8_max = nullptr;  // [n]
  int n = 0;
  int history_len = 1;
};

// One parameter for the optimizer's multi-tensor ops (TE's multi_tensor_apply), all pointers
// in backend memory; a table of these lives there too.
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  const bf16_t* grad16 = nullptr;  // the gradient in BF16 instead (--fp8-weights, the CPU's)
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
  float decay = 0.0f;  // the weight decay applied to this tensor (0: none)
  // Where set, the new param's BF16 copy (bf16_from_float), written in the update's pass: a
  // BF16 GEMM's weight operand (Parameter::value16) without a pass of its own.
  bf16_t* param16 = nullptr;
  bool operator==(const AdamWTensor&) const = default;
};

struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float bc1 = 1, bc2 = 1;  // 1 - beta^t, computed on the host (train/adamw.cpp)
};

// An optimizer step decided where the gradients are (issue 34: a training step need not wait
// for the host): the backend's decide_step fills it from the step's row losses and gradient
// norm, and its adamw_step follows it. It lives in backend memory from step to step.
struct StepDecision {
  int32_t skip = 0;        // a row loss or the norm was not finite: the step changes nothing
  int32_t steps = 0;       // the optimizer's steps taken, this one included unless it skips
  float bc1 = 1, bc2 = 1;  // AdamWHyper's bias corrections for `steps`
};

// The dtype a ProducerOut asks for; Error naming `op` unless exactly one output is set and an
// FP8 one has its scale (a block-scaled output, which has no one dtype, is an Error too: a
// backend that produces them checks blocks.row first).
DType producer_out_dtype(const ProducerOut& out, const char* op);

}  // namespace fp8lm
