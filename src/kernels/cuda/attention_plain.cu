// The plain attention path: the flash kernel's oracle in the tests and its fallback for head
// sizes it has no tiles for. Each step is a batched GEMM or a one-pass kernel over the full
// T x T score matrix of every (batch, head), so memory is O(B * H * T^2):
//   forward:  S = scale * Q·Kᵀ (FP32); P = causal softmax(S) (BF16, normalized), lse;
//             O = P·V (FP32), merged into out.
//   backward: S again; dP = dO·Vᵀ; P = exp(S - lse), dS = P * (dP - D) with D = rowsum(dO * O);
//             dV = Pᵀ·dO, dQ = scale * dS·K, dK = scale * dSᵀ·Q, merged into dqkv.
// Q, K, V, dO, P and dS are BF16 (the GEMM operands); everything else is FP32.
//
// Head-major buffers (attention_layout.h) have t_pad = T and rows of hd_pad = hd rounded up to
// 8 BF16 (16 bytes); T x T matrices have rows of ld = T rounded up to 8. Only the leading
// dimensions are padded: every GEMM's M, N and K are the true T and hd.
//
// gemm_batched_bf16's leading dimensions are row strides of the operands as stored: an
// operand used transposed (Trans::T) is stored with its dimensions swapped.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_layout.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"

namespace fp8lm::cuda::plain {
namespace {

using attention_detail::at;
using attention_detail::Carve;
using attention_detail::merge_heads;
using attention_detail::merge_qkv;
using attention_detail::round_up;
using attention_detail::row_dots;
using attention_detail::split_heads;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

attention_detail::Workspace& workspace() {
  static attention_detail::Workspace w;
  return w;
}

__device__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per row of S [rows = B*H*T, ld]: query i = row % T sees keys 0..i. P's masked
// entries (i < j < T) are written as zeros because P·V sums over all T keys.
__global__ void causal_softmax_kernel(__nv_bfloat16* P, float* lse, const float* S, int64_t rows,
                                      int64_t T, int64_t ld) {
  const int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t i = row % T;
  const float* s = S + row * ld;
  float m = -INFINITY;
  for (int64_t j = lane; j <= i; j += 32) m = fmaxf(m, s[j]);
  m = warp_max(m);  // finite: key 0 is always visible
  float sum = 0.0f;
  for (int64_t j = lane; j <= i; j += 32) sum += expf(s[j] - m);
  sum = warp_sum(sum);
  const float inv_sum = 1.0f / sum;
  __nv_bfloat16* p = P + row * ld;
  for (int64_t j = lane; j < T; j += 32) {
    p[j] = __float2bfloat16_rn(j <= i ? expf(s[j] - m) * inv_sum : 0.0f);
  }
  if (lane == 0) lse[row] = m + logf(sum);
}

// One thread per element of the [rows, T] matrices: P = exp(S - lse) and dS = P * (dP - D),
// zero where j > i.
__global__ void softmax_backward_kernel(__nv_bfloat16* P, __nv_bfloat16* dS, const float* S,
                                        const float* dP, const float* lse, const float* D,
                                        int64_t rows, int64_t T, int64_t ld) {
  const int64_t total = rows * T;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx / T;
    const int64_t j = idx % T;
    const int64_t i = row % T;
    const int64_t e = row * ld + j;
    float p = 0.0f, ds = 0.0f;
    if (j <= i) {
      p = expf(S[e] - lse[row]);
      ds = p * (dP[e] - D[row]);
    }
    P[e] = __float2bfloat16_rn(p);
    dS[e] = __float2bfloat16_rn(ds);
  }
}

unsigned blocks(int64_t threads) {
  return static_cast<unsigned>(std::min<int64_t>((threads + kThreads - 1) / kThreads, 1 << 16));
}

// Shapes shared by forward and backward.
struct Dims {
  int64_t B, T, C, H, hd, hd_pad, ld, BH;
  float scale;
  QkvLayout lay;
  Dims(int64_t B_, int64_t T_, int64_t C_, int64_t H_, int64_t Hkv)
      : B(B_),
        T(T_),
        C(C_),
        H(H_),
        hd(C_ / H_),
        hd_pad(round_up(hd, 8)),
        ld(round_up(T_, 8)),
        BH(B_ * H_),
        scale(1.0f / std::sqrt(static_cast<float>(hd))),
        lay(C_, H_, Hkv) {}
  int64_t heads_elems() const { return BH * T * hd_pad; }  // one head-major tensor
  int64_t head_stride() const { return T * hd_pad; }
  int64_t scores_elems() const { return BH * T * ld; }  // one T x T matrix per head
  int64_t scores_stride() const { return T * ld; }
};

// S = scale * Q·Kᵀ for every head.
void scores(float* S, const bf16_t* Q, const bf16_t* K, const Dims& d, cudaStream_t stream) {
  gemm_batched_bf16(Trans::N, Trans::T, d.T, d.T, d.hd, d.scale, Q, d.hd_pad, d.head_stride(), K,
                    d.hd_pad, d.head_stride(), 0.0f, S, /*c_bf16=*/false, d.ld, d.scores_stride(),
                    d.BH, stream);
}

// Q, K and V of every head out of qkv.
void split_qkv(bf16_t* Q, bf16_t* K, bf16_t* V, const float* qkv, const Dims& d,
               cudaStream_t stream) {
  bf16_t* const parts[3] = {Q, K, V};
  attention_detail::split_qkv(parts, qkv, d.lay, d.B, d.T, d.H, d.T, d.hd_pad, stream);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t H, int64_t Hkv, cudaStream_t stream) {
  if (B == 0 || T == 0) return;
  const Dims d(B, T, C, H, Hkv);
  Carve carve;
  const size_t q_at = carve.add<bf16_t>(d.heads_elems());
  const size_t k_at = carve.add<bf16_t>(d.heads_elems());
  const size_t v_at = carve.add<bf16_t>(d.heads_elems());
  const size_t s_at = carve.add<float>(d.scores_elems());
  const size_t p_at = carve.add<bf16_t>(d.scores_elems());
  const size_t o_at = carve.add<float>(d.heads_elems());
  void* base = workspace().get(carve.size());
  bf16_t* Q = at<bf16_t>(base, q_at);
  bf16_t* K = at<bf16_t>(base, k_at);
  bf16_t* V = at<bf16_t>(base, v_at);
  float* S = at<float>(base, s_at);
  bf16_t* P = at<bf16_t>(base, p_at);
  float* O = at<float>(base, o_at);

  split_qkv(Q, K, V, qkv, d, stream);
  scores(S, Q, K, d, stream);
  const int64_t rows = d.BH * T;
  causal_softmax_kernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0,
                          stream>>>(reinterpret_cast<__nv_bfloat16*>(P), lse, S, rows, T, d.ld);
  FP8LM_CUDA_CHECK_LAUNCH();
  // O = P·V: [T, T] x [T, hd] per head.
  gemm_batched_bf16(Trans::N, Trans::N, T, d.hd, T, 1.0f, P, d.ld, d.scores_stride(), V, d.hd_pad,
                    d.head_stride(), 0.0f, O, /*c_bf16=*/false, d.hd_pad, d.head_stride(), d.BH,
                    stream);
  merge_heads(out, C, 0, O, B, T, H, d.hd, T, d.hd_pad, stream);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t H, int64_t Hkv,
                        cudaStream_t stream) {
  if (B == 0 || T == 0) return;
  const Dims d(B, T, C, H, Hkv);
  Carve carve;
  const size_t q_at = carve.add<bf16_t>(d.heads_elems());
  const size_t k_at = carve.add<bf16_t>(d.heads_elems());
  const size_t v_at = carve.add<bf16_t>(d.heads_elems());
  const size_t do_at = carve.add<bf16_t>(d.heads_elems());
  const size_t delta_at = carve.add<float>(d.BH * T);
  const size_t s_at = carve.add<float>(d.scores_elems());
  const size_t dp_at = carve.add<float>(d.scores_elems());
  const size_t p_at = carve.add<bf16_t>(d.scores_elems());
  const size_t ds_at = carve.add<bf16_t>(d.scores_elems());
  const size_t grad_at = carve.add<float>(3 * d.heads_elems());  // dQ | dK | dV
  void* base = workspace().get(carve.size());
  bf16_t* Q = at<bf16_t>(base, q_at);
  bf16_t* K = at<bf16_t>(base, k_at);
  bf16_t* V = at<bf16_t>(base, v_at);
  bf16_t* dO = at<bf16_t>(base, do_at);
  float* delta = at<float>(base, delta_at);
  float* S = at<float>(base, s_at);
  float* dP = at<float>(base, dp_at);
  bf16_t* P = at<bf16_t>(base, p_at);
  bf16_t* dS = at<bf16_t>(base, ds_at);
  float* dQ = at<float>(base, grad_at);
  float* dK = dQ + d.heads_elems();
  float* dV = dK + d.heads_elems();

  split_qkv(Q, K, V, qkv, d, stream);
  split_heads(dO, dout, C, 0, B, T, H, d.hd, T, d.hd_pad, stream);
  row_dots(delta, dout, out, B, T, H, d.hd, T, stream);
  scores(S, Q, K, d, stream);
  // dP = dO·Vᵀ: [T, hd] x [hd, T] per head.
  gemm_batched_bf16(Trans::N, Trans::T, T, T, d.hd, 1.0f, dO, d.hd_pad, d.head_stride(), V,
                    d.hd_pad, d.head_stride(), 0.0f, dP, /*c_bf16=*/false, d.ld, d.scores_stride(),
                    d.BH, stream);
  const int64_t rows = d.BH * T;
  softmax_backward_kernel<<<blocks(rows * T), kThreads, 0, stream>>>(
      reinterpret_cast<__nv_bfloat16*>(P), reinterpret_cast<__nv_bfloat16*>(dS), S, dP, lse, delta,
      rows, T, d.ld);
  FP8LM_CUDA_CHECK_LAUNCH();
  // dV = Pᵀ·dO: P is stored [queries, keys], so op(P) = Pᵀ is [keys, queries].
  gemm_batched_bf16(Trans::T, Trans::N, T, d.hd, T, 1.0f, P, d.ld, d.scores_stride(), dO, d.hd_pad,
                    d.head_stride(), 0.0f, dV, /*c_bf16=*/false, d.hd_pad, d.head_stride(), d.BH,
                    stream);
  // dQ = scale * dS·K: [queries, keys] x [keys, hd].
  gemm_batched_bf16(Trans::N, Trans::N, T, d.hd, T, d.scale, dS, d.ld, d.scores_stride(), K,
                    d.hd_pad, d.head_stride(), 0.0f, dQ, /*c_bf16=*/false, d.hd_pad,
                    d.head_stride(), d.BH, stream);
  // dK = scale * dSᵀ·Q: [keys, queries] x [queries, hd].
  gemm_batched_bf16(Trans::T, Trans::N, T, d.hd, T, d.scale, dS, d.ld, d.scores_stride(), Q,
                    d.hd_pad, d.head_stride(), 0.0f, dK, /*c_bf16=*/false, d.hd_pad,
                    d.head_stride(), d.BH, stream);
  const float* const grads[3] = {dQ, dK, dV};
  merge_qkv(dqkv, grads, d.lay, B, T, H, T, d.hd_pad, stream);
}

}  // namespace fp8lm::cuda::plain
