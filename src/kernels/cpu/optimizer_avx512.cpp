// Built with AVX-512 flags (src/CMakeLists.txt); reached only through optimizer.cpp's dispatch.
#include <immintrin.h>

#include "fp8/lanes_avx512.h"
#include "kernels/cpu/optimizer_isa.h"

namespace fp8lm::cpu::avx512 {
namespace {

// Plain loads and stores where all sixteen lanes are live (the masked forms are slower on Zen 4).
using isa::live_lanes;
using isa::load_live;
using isa::store_live;

__m512 load_gradient(const float* g, __mmask16 k) {
  return load_live(k, g);
}
__m512 load_gradient(const bf16_t* g, __mmask16 k) {  // BF16 is FP32's upper half
  const __m256i half = load_live(k, g);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

template <class G, bool kWritesBf16>
void update(float* w, float* m, float* v, const G* g, int64_t n, float grad_scale,
            const AdamWHyper& h, float decay, bf16_t* w16) {
  const __m512 scale = _mm512_set1_ps(grad_scale), beta1 = _mm512_set1_ps(h.beta1),
               beta2 = _mm512_set1_ps(h.beta2), one_beta1 = _mm512_set1_ps(1.0f - h.beta1),
               one_beta2 = _mm512_set1_ps(1.0f - h.beta2), bc1 = _mm512_set1_ps(h.bc1),
               bc2 = _mm512_set1_ps(h.bc2), eps = _mm512_set1_ps(h.eps), lr = _mm512_set1_ps(h.lr),
               wd = _mm512_set1_ps(decay);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = live_lanes(n - j);
    const __m512 gj = _mm512_mul_ps(load_gradient(g + j, k), scale);
    const __m512 wj = load_live(k, w + j);
    const __m512 mj =
        _mm512_add_ps(_mm512_mul_ps(beta1, load_live(k, m + j)), _mm512_mul_ps(one_beta1, gj));
    const __m512 vj = _mm512_add_ps(_mm512_mul_ps(beta2, load_live(k, v + j)),
                                    _mm512_mul_ps(_mm512_mul_ps(one_beta2, gj), gj));
    const __m512 step = _mm512_div_ps(_mm512_div_ps(mj, bc1),
                                      _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vj, bc2)), eps));
    const __m512 wn =
        _mm512_sub_ps(wj, _mm512_mul_ps(lr, _mm512_add_ps(step, _mm512_mul_ps(wd, wj))));
    store_live(k, m + j, mj);
    store_live(k, v + j, vj);
    store_live(k, w + j, wn);
    if constexpr (kWritesBf16) isa::store_bf16(w16 + j, wn, k);
  }
}

template <class G>
void update(float* w, float* m, float* v, const G* g, int64_t n, float grad_scale,
            const AdamWHyper& h, float decay, bf16_t* w16) {
  if (w16 != nullptr) return update<G, true>(w, m, v, g, n, grad_scale, h, decay, w16);
  update<G, false>(w, m, v, g, n, grad_scale, h, decay, nullptr);
}

// Rows r[0..7] (eight floats each) transposed: r[k] holds element k of every row.
void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]),
               t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]),
               t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]),
               t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

}  // namespace

void sum_of_squares_8(double* partial, const float* const* g, const int64_t* n) {
  int64_t common = n[0];
  for (int i = 1; i < 8; ++i) common = n[i] < common ? n[i] : common;
  __m512d sum = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= common; j += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(g[i] + j);
    transpose8(r);  // r[k]: element j + k of each chunk
    for (int k = 0; k < 8; ++k) {
      const __m512d v = _mm512_cvtps_pd(r[k]);
      sum = _mm512_add_pd(sum, _mm512_mul_pd(v, v));
    }
  }
  _mm512_storeu_pd(partial, sum);
  for (int i = 0; i < 8; ++i) {  // each chunk's rest, in order
    double s = partial[i];
    for (int64_t t = j; t < n[i]; ++t) {
      const double v = g[i][t];
      s += v * v;
    }
    partial[i] = s;
  }
}

void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float grad_scale,
                  const AdamWHyper& h, float decay, bf16_t* w16) {
  update(w, m, v, g, n, grad_scale, h, decay, w16);
}

void adamw_update(float* w, float* m, float* v, const bf16_t* g, int64_t n, float grad_scale,
                  const AdamWHyper& h, float decay, bf16_t* w16) {
  update(w, m, v, g, n, grad_scale, h, decay, w16);
}

}  // namespace fp8lm::cpu::avx512
