// One new query per sequence against a KV cache (kernels/cpu/attention.h's attention_decode),
// in FP32: a block per (sequence, head) scores the query against the cached keys a tile of
// kTile at a time into shared memory, takes the softmax with fixed-tree block reductions (the
// same bits every run) and an online rescaling across tiles (flash attention's), and sums the
// cached values with those weights, a thread per output column. Shared memory is one tile
// whatever the length, so any cache the model allows decodes (a score per cached key in
// shared memory stopped at 12,288 keys: 48 KB without an opt-in). A cache of at most kTile
// keys is one tile, with the bits of a plain softmax (the rescaling multiplies zeros).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kTile = 4096;       // keys scored at a time: 16 KB of shared memory
constexpr int kColumnsPerThread = 4;  // head sizes up to 4 x kThreads

__global__ void attention_decode_kernel(float* out, const float* q, const float* k_cache,
                                        const float* v_cache, int64_t Tmax, int64_t len, int64_t C,
                                        int64_t H, int64_t Hkv) {
  __shared__ float scores[kTile];
  const int64_t b = blockIdx.x / H, h = blockIdx.x % H, hd = C / H;
  const int64_t kv = Hkv * hd, at = b * Tmax * kv + h / (H / Hkv) * hd;  // its key/value head
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const float* qh = q + b * C + h * hd;
  const float* kb = k_cache + at;
  const float* vb = v_cache + at;
  float m = -INFINITY, sum = 0.0f, acc[kColumnsPerThread] = {};
  for (int64_t t0 = 0; t0 < len; t0 += kTile) {
    const int64_t n = len - t0 < kTile ? len - t0 : kTile;
    float local_max = -INFINITY;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
      const float* kt = kb + (t0 + t) * kv;
      float s = 0.0f;
      for (int64_t d = 0; d < hd; ++d) s += qh[d] * kt[d];
      s *= scale;
      scores[t] = s;
      local_max = fmaxf(local_max, s);
    }
    const float m_new = fmaxf(m, block_allreduce(local_max, Fmax{}, -INFINITY));
    const float rescale = expf(m - m_new);  // the earlier tiles' weights, to the new maximum
    float local_sum = 0.0f;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
      const float p = expf(scores[t] - m_new);
      scores[t] = p;
      local_sum += p;
    }
    sum = sum * rescale + block_allreduce(local_sum, Sum{}, 0.0f);
    for (int j = 0; j < kColumnsPerThread; ++j) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (d >= hd) break;
      float tile = 0.0f;
      for (int64_t t = 0; t < n; ++t) tile += scores[t] * vb[(t0 + t) * kv + d];
      acc[j] = acc[j] * rescale + tile;
    }
    m = m_new;
    __syncthreads();  // every thread is done with this tile's weights before the next's
  }
  for (int j = 0; j < kColumnsPerThread; ++j) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (d < hd) out[b * C + h * hd + d] = acc[j] / sum;
  }
}

}  // namespace

void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t B, int64_t Tmax, int64_t len, int64_t C, int64_t H, int64_t Hkv,
                      cudaStream_t stream) {
  if (len < 1 || len > Tmax) {
    throw Error("attention_decode: " + std::to_string(len) + " cached positions (at most " +
                std::to_string(Tmax) + ")");
  }
  if (C / H > kColumnsPerThread * kThreads) {
    throw Error("attention_decode: head size " + std::to_string(C / H) + " (at most " +
                std::to_string(kColumnsPerThread * kThreads) + ")");
  }
  if (B == 0) return;
  attention_decode_kernel<<<static_cast<unsigned>(B * H), kThreads, 0, stream>>>(
      out, q, k_cache, v_cache, Tmax, len, C, H, Hkv);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
