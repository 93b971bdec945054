// One new query per sequence against a KV cache (kernels/cpu/attention.h's attention_decode),
// in FP32: a block per (sequence, head) scores the query against the len cached keys into
// shared memory, takes the softmax with fixed-tree block reductions (the same bits every run),
// and sums the cached values with those weights, a thread per output column.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void attention_decode_kernel(float* out, const float* q, const float* k_cache,
                                        const float* v_cache, int64_t Tmax, int64_t len, int64_t C,
                                        int64_t H, int64_t Hkv) {
  extern __shared__ float scores[];  // [len]
  const int64_t b = blockIdx.x / H, h = blockIdx.x % H, hd = C / H;
  const int64_t kv = Hkv * hd, at = b * Tmax * kv + h / (H / Hkv) * hd;  // its key/value head
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const float* qh = q + b * C + h * hd;
  const float* kb = k_cache + at;
  const float* vb = v_cache + at;
  float local_max = -INFINITY;
  for (int64_t t = threadIdx.x; t < len; t += blockDim.x) {
    const float* kt = kb + t * kv;
    float s = 0.0f;
    for (int64_t d = 0; d < hd; ++d) s += qh[d] * kt[d];
    s *= scale;
    scores[t] = s;
    local_max = fmaxf(local_max, s);
  }
  const float m = block_allreduce(local_max, Fmax{}, -INFINITY);
  float local_sum = 0.0f;
  for (int64_t t = threadIdx.x; t < len; t += blockDim.x) {
    const float p = expf(scores[t] - m);
    scores[t] = p;
    local_sum += p;
  }
  const float sum = block_allreduce(local_sum, Sum{}, 0.0f);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t t = 0; t < len; ++t) acc += scores[t] * vb[t * kv + d];
    out[b * C + h * hd + d] = acc / sum;
  }
}

}  // namespace

void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv,
                      cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(len) * sizeof(float);
  if (len < 1 || len > Tmax || shared > 48 * 1024) {
    throw Error("attention_decode: " + std::to_string(len) + " cached positions (at most " +
                std::to_string(Tmax) + " and 12288)");
  }
  if (B == 0) return;
  attention_decode_kernel<<<static_cast<unsigned>(B * H), kThreads, shared, stream>>>(
      out, q, k_cache, v_cache, Tmax, len, C, H, Hkv);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
