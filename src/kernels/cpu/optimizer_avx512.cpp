// Built with AVX-512 flags (src/CMakeLists.txt); reached only through optimizer.cpp's dispatch.
#include <immintrin.h>

#include "kernels/cpu/optimizer_isa.h"

namespace fp8lm::cpu::avx512 {
namespace {

__m512 load_gradient(const float* g, __mmask16 k) {
  return _mm512_maskz_loadu_ps(k, g);
}
__m512 load_gradient(const bf16_t* g, __mmask16 k) {  // BF16 is FP32's upper half
  const __m256i half = _mm256_maskz_loadu_epi16(k, g);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

template <class G>
void update(float* w, float* m, float* v, const G* g, int64_t n, float grad_scale,
            const AdamWHyper& h, float decay) {
  const __m512 scale = _mm512_set1_ps(grad_scale), beta1 = _mm512_set1_ps(h.beta1),
               beta2 = _mm512_set1_ps(h.beta2), one_beta1 = _mm512_set1_ps(1.0f - h.beta1),
               one_beta2 = _mm512_set1_ps(1.0f - h.beta2), bc1 = _mm512_set1_ps(h.bc1),
               bc2 = _mm512_set1_ps(h.bc2), eps = _mm512_set1_ps(h.eps), lr = _mm512_set1_ps(h.lr),
               wd = _mm512_set1_ps(decay);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1u);
    const __m512 gj = _mm512_mul_ps(load_gradient(g + j, k), scale);
    const __m512 wj = _mm512_maskz_loadu_ps(k, w + j);
    const __m512 mj = _mm512_add_ps(_mm512_mul_ps(beta1, _mm512_maskz_loadu_ps(k, m + j)),
                                    _mm512_mul_ps(one_beta1, gj));
    const __m512 vj = _mm512_add_ps(_mm512_mul_ps(beta2, _mm512_maskz_loadu_ps(k, v + j)),
                                    _mm512_mul_ps(_mm512_mul_ps(one_beta2, gj), gj));
    const __m512 step = _mm512_div_ps(_mm512_div_ps(mj, bc1),
                                      _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vj, bc2)), eps));
    const __m512 wn =
        _mm512_sub_ps(wj, _mm512_mul_ps(lr, _mm512_add_ps(step, _mm512_mul_ps(wd, wj))));
    _mm512_mask_storeu_ps(m + j, k, mj);
    _mm512_mask_storeu_ps(v + j, k, vj);
    _mm512_mask_storeu_ps(w + j, k, wn);
  }
}

}  // namespace

void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float grad_scale,
                  const AdamWHyper& h, float decay) {
  update(w, m, v, g, n, grad_scale, h, decay);
}

void adamw_update(float* w, float* m, float* v, const bf16_t* g, int64_t n, float grad_scale,
                  const AdamWHyper& h, float decay) {
  update(w, m, v, g, n, grad_scale, h, decay);
}

}  // namespace fp8lm::cpu::avx512
