#pragma once
// The unfused twin of attention.h's flash kernels (--no-fusion), as a framework without fused
// attention runs it: q, k and v copied out into head-major tensors, the scores of every head
// materialized, softmax over them, and batched GEMMs. The probabilities [B, H, T, T] are kept
// for backward, so memory and traffic grow with T² where the flash kernels stay O(T).
#include <cstdint>

namespace fp8lm::cpu {

// qkv [B, T, C + 2*Ckv], out [B, T, C] as in attention.h (Hkv key/value heads); probs
// [B, H, T, T] written (zeros above the diagonal) and needed by backward.
void attention_forward_unfused(float* out, float* probs, const float* qkv, int64_t B, int64_t T,
                               int64_t C, int64_t H, int64_t Hkv);
// dqkv [B, T, C + 2*Ckv] overwritten.
void attention_backward_unfused(float* dqkv, const float* dout, const float* qkv,
                                const float* probs, int64_t B, int64_t T, int64_t C, int64_t H,
                                int64_t Hkv);

}  // namespace fp8lm::cpu
