#pragma once
// Causal multi-head (and grouped-query) attention on the device with the CPU kernel's layout
// (kernels/cpu/attention.h): qkv [B, T, C + 2*Ckv] (q | k | v, H query heads, Hkv key/value
// heads), out [B, T, C], lse [B, H, T] (log-sum-exp of each query's scaled scores, saved for
// backward). A shared key/value head is repeated for each of its query heads in the head-major
// copies the kernels read, and its gradient summed from theirs. Q, K, V and P
// are BF16 inside, as issue 6 asks; softmax statistics and accumulation are FP32.
//
// Two implementations with one signature: a flash-style kernel (tiles in shared memory, an
// online softmax, no T x T matrix) used by the model, and a plain one (batched GEMMs for
// Q·Kᵀ and P·V with a causal softmax kernel between) that is its oracle in the tests. The flash
// kernels exist for head sizes 16, 32, .., 128 on every GPU and 160, 192, 224, 256 where a block
// may have 163 KiB of shared memory (sm_80, sm_90); any other head size runs the plain path,
// which holds B·H·T² scores.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv, cudaStream_t stream);
// Whether head size hd runs the flash kernels on the current device (else the plain path).
bool flash_attention_head_size(int64_t hd);
// dqkv overwritten.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv,
                        cudaStream_t stream);

// One new query per sequence against a KV cache [B, Tmax, Ckv] holding positions [0, len), the
// new token's own k and v at len - 1: out [B, C], FP32 (kernels/cpu/attention.h's contract).
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv,
                      cudaStream_t stream);

namespace plain {
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv, cudaStream_t stream);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv,
                        cudaStream_t stream);
}  // namespace plain

// Rotary position embeddings in place (kernels/cpu/rope.h's contract; the same float angles,
// their cos and sin in double).
void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
          int64_t hd, float theta, bool inverse, cudaStream_t stream);

}  // namespace fp8lm::cuda
