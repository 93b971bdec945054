#pragma once
// Causal multi-head attention on the device with the CPU kernel's layout (kernels/cpu/
// attention.h): qkv [B, T, 3C] (q | k | v, head h in columns h*hd..), out [B, T, C], lse
// [B, H, T] (log-sum-exp of each query's scaled scores, saved for backward). Q, K, V and P
// are BF16 inside, as issue 6 asks; softmax statistics and accumulation are FP32.
//
// Two implementations with one signature: a flash-style kernel (tiles in shared memory, an
// online softmax, no T x T matrix) used by the model, and a plain one (batched GEMMs for
// Q·Kᵀ and P·V with a causal softmax kernel between) that is its oracle in the tests. The flash
// kernels exist for head sizes 16, 32, .., 128; any other head size runs the plain path.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, cudaStream_t stream);
// dqkv overwritten.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                        cudaStream_t stream);

// One new query per sequence against a KV cache [B, Tmax, C] holding positions [0, len), the
// new token's own k and v at len - 1: out [B, C], FP32 (kernels/cpu/attention.h's contract).
// len * 4 bytes of scores per block must fit in 48 KiB of shared memory.
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H,
                      cudaStream_t stream);

namespace plain {
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, cudaStream_t stream);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                        cudaStream_t stream);
}  // namespace plain

}  // namespace fp8lm::cuda
