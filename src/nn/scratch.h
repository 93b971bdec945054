#pragma once
// Buffers that live only inside one module call (a layer's forward temporaries, backward
// scratch, the FP32 input a BF16 or FP8 GEMM copies from) are shared by every layer: one per
// role, backend and thread, in that backend's memory, grown to the largest use and then reused. A
// steady-state step allocates none of them, and their memory does not grow with depth. Two roles
// never share storage, so a module may hold several at once; a role's contents are dead once the
// call that filled it returns.
#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

namespace fp8lm {

enum class Scratch : uint8_t {
  LayerAttnOut,    // TransformerLayer forward: attention's output before the residual add
  LayerMlpOut,     // TransformerLayer forward: the MLP's output before the residual add
  AttnDOut,        // MultiheadAttention backward: gradient of the attention output
  AttnDQkv,        // MultiheadAttention backward: gradient of the packed q, k, v
  MlpDAct,         // LayerNormMLP backward: gradient of the activation output
  MlpDPre,         // LayerNormMLP backward: gradient of the pre-activation
  NormDOut,        // LayerNormLinear / LayerNormMLP backward: gradient of the norm output
  NormOut,         // the norm's FP32 output when the GEMM keeps its own BF16/FP8 copy
  ActOut,          // the activation's FP32 output when fc2 keeps its own BF16/FP8 copy
  LinearDy,        // Linear backward: dy cast to BF16 or FP8
  LinearDyT,       // Linear backward: dy's FP8 codes transposed (Backend::fp8_gemms_want_tn)
  LinearDyBf16,    // Linear backward: dy's FP8 codes' values (Backend::fp8_gemms_take_decoded)
  InputFp8,        // Linear FP8 training forward on such a backend: the input's row-wise codes
  QkvOut,          // attention's packed q, k, v in FP32 while a BF16 copy is what is saved
  MlpPre,          // the MLP's pre-activation in FP32 while a BF16 copy is what is saved
  WeightGrad,      // Linear backward: the FP32 weight gradient before it joins a BF16 gradient
  WeightFp8,       // Linear in FP8 training: the weight's codes for one GEMM
  BlockInput,      // Linear under a block-scaled recipe: the input's BF16 operand for forward
  BlockDyCol,      // Linear under a block-scaled recipe: dy's column-wise BF16 operand (wgrad)
  BlockCodes,      // Linear under a block-scaled recipe: one cast's codes
  BlockScales,     // Linear under a block-scaled recipe: one cast's block scales
  BlockCodesCol,   // Linear under a block-scaled recipe: the column-wise cast's codes in a pair
  BlockScalesCol,  // Linear under a block-scaled recipe: the column-wise cast's block scales
  kCount
};

// At least `bytes` bytes for this role in the backend's memory on this thread, 64-byte aligned.
void* scratch_bytes(Backend& backend, Scratch role, size_t bytes);

template <class T>
T* scratch(Backend& backend, Scratch role, int64_t n) {
  return static_cast<T*>(scratch_bytes(backend, role, static_cast<size_t>(n) * sizeof(T)));
}

// Bytes held by this thread's scratch buffers on every backend (the bench's "workspace").
size_t scratch_footprint();

}  // namespace fp8lm
