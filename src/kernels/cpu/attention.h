#pragma once
// Causal scaled-dot-product attention over the output of a fused QKV projection, with
// grouped-query attention: H query heads share Hkv key/value heads (Hkv = H: multi-head).
// Preconditions (checked by the caller, not here): H divides C, Hkv divides H, T >= 1,
// 1 <= len <= Tmax.
#include <cstdint>
#include <string_view>

#include "core/bf16.h"
#include "kernels/types.h"  // QkvLayout

namespace fp8lm::cpu {

// qkv: [B, T, C + 2*Ckv] with hd = C / H and Ckv = Hkv * hd; per token the C query values,
// then Ckv key values, then Ckv value values (the fused projection's output, no copies).
// Query head h uses columns [h*hd, (h+1)*hd) of q and key/value head h / (H / Hkv) of k and v,
// as Llama's repeat_kv does. out: [B, T, C], head h in columns [h*hd, (h+1)*hd). lse: [B, H, T],
// the log-sum-exp of each query's scaled scores, saved for backward. Scores are
// q.k / sqrt(hd); query t sees keys 0..t.
// Flash style: online softmax over key tiles, memory O(tile * hd) per thread, never T x T.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv);

// dqkv: [B, T, C + 2*Ckv], overwritten (not accumulated); a shared key/value head's gradient
// sums those of its query heads. dout: [B, T, C]. qkv, out and lse are the
// forward's input and outputs; scores are recomputed per tile from q, k and lse, so scratch
// stays O(tile * hd + T) per thread.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv);

// The same two with BF16 math, as the GPU's flash attention does it and TE's BF16 attention
// under autocast: q, k, v and dout rounded to BF16, and the softmax weights P and dS rounded to
// BF16 before they weigh values, keys or queries; every product of two BF16 values summed in
// FP32 (attention_isa.h's dot2: two products a rounding, the order the AVX512-BF16 instruction
// takes). Softmax, its statistics (lse) and delta stay FP32 as above.
void attention_forward_bf16(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                            int64_t C, int64_t H, int64_t Hkv);
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                             int64_t Hkv);
// The same with q, k and v as saved in BF16 for backward (nn/saved_activation.h): the bits of
// the above on them widened, without the widened copy.
void attention_backward_bf16(float* dqkv, const float* dout, const bf16_t* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                             int64_t Hkv);
// What makes those products on this CPU (the same bits whichever): "vdpbf16ps", "fma" (two
// FMAs a pair, where vdpbf16ps is slower or absent) or "generic" (plain C++, without AVX-512).
std::string_view attention_bf16_products();

// One new query per sequence against a KV cache. q: [B, C]; k_cache, v_cache: [B, Tmax, Ckv]
// holding positions [0, len), the new token's own k and v already at len - 1. out: [B, C],
// equal to the last row of attention_forward over the same len tokens.
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv);

namespace ref {
// The oracle: plain loops, double accumulation, no threads. Same contracts as above.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv);
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv);
}  // namespace ref

}  // namespace fp8lm::cpu
