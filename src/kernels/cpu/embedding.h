#pragma once
// Token plus learned position embeddings (GPT-2 style): the first op of the model. A null wpe
// (dwpe) is a model without a position table (rotary embeddings): the token's row alone.
// FP32; threads over positions (forward) or column blocks (backward); results do not depend
// on the thread count.
#include <cstdint>

namespace fp8lm::cpu {

// out [B*T, C] = wte[tokens[b, t]] + wpe[t], for tokens [B, T] row-major, wte [V, C] and
// wpe [>= T, C]. Tokens must lie in [0, V): the kernel does not know V and does not check.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C);

// ACCUMULATES (+=) into dwte [V, C] and dwpe [>= T, C] so micro-batches add up. A token that
// occurs several times gets its gradients added in position order, so the result is
// deterministic (and the same for any thread count).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C);

namespace ref {
// The oracle: plain loops, double accumulation, no threads.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C);
}  // namespace ref

}  // namespace fp8lm::cpu
