#pragma once
// Token + position embedding and the fused softmax-cross-entropy on the device, with the CPU
// kernels' signatures (kernels/cpu/embedding.h, cross_entropy.h).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, cudaStream_t stream);
// dwte, dwpe +=. Rows of dwte are summed in a fixed order (deterministic), not by atomics.
// scratch: device memory of embedding_backward_scratch_bytes(B * T) for the sort, the caller's
// to keep, so that a graph captured from the call keeps valid addresses.
size_t embedding_backward_scratch_bytes(int64_t positions);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, void* scratch, cudaStream_t stream);

// One pass per row: losses[r] = -log softmax(logits[r])[targets[r]], and
// dlogits = (softmax - onehot) * grad_scale (dlogits may alias logits). *loss_sum (device)
// = sum of losses, overwritten, summed in a fixed order (loss_sum nullptr: not computed).
// A target < 0 ignores its row (loss 0, zero gradient); a target >= V, which the host refuses
// before it uploads the targets (check_targets), gives the row a NaN loss and NaN gradients (a
// kernel cannot throw).
void softmax_cross_entropy(float* dlogits, float* losses, float* loss_sum, const float* logits,
                           const int32_t* targets, int64_t rows, int64_t V, float grad_scale,
                           cudaStream_t stream);

// out[b] = argmax over V of logits[b] (first of equal maxima): greedy decoding.
void argmax_rows(int32_t* out, const float* logits, int64_t rows, int64_t V, cudaStream_t stream);

}  // namespace fp8lm::cuda
