// Built with AVX-512 flags only (src/CMakeLists.txt): the BF16 kernel set (attention_avx512_bf16.h)
// for CPUs whose VDPBF16PS is no faster than two FP32 FMAs (this project's Sapphire Rapids VM
// issues half the FLOPs with it) or that lack it. A pair product is two FMAs on the pair's
// halves widened to FP32 (exact: a BF16 is an FP32 with its low 16 bits zero), high halves
// first, as dot2 orders them; the products of two BF16 values are exact, so each FMA rounds
// once, as the instruction's steps do.
//
// dot2 flushes what the instruction flushes (subnormal inputs, accumulators and results); here
// the FMAs run with MXCSR's DAZ and FTZ set, only around the products: the scale of the scores
// and the alpha rescale of a weighted sum are multiplies dot2 does not flush, so they run
// outside. One corner differs from dot2's: x86 detects a tiny result after rounding to 24 bits,
// so a sum in the last half-ulp below FLT_MIN flushes here and rounds up to FLT_MIN there.
// Attention's values (softmax weights, activations of order one) never come near 1e-38.
#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "kernels/cpu/attention_avx512_bf16.h"

namespace fp8lm::cpu::avx512 {
namespace {

using attention_tiles::Bf16Kernels;
using attention_tiles::kKeyTile;
using attention_tiles::Visibility;

// A pair's halves as two FP32 vectors.
struct Halves {
  __m512 hi, lo;
};

Halves widen(__m512i pairs) {
  return {_mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int(0xffff0000u)))),
          _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16))};
}

struct FmaDot {
  using Wide = Halves;
  using Vec = Halves;
  static Wide broadcast(uint32_t pair) { return widen(_mm512_set1_epi32(static_cast<int>(pair))); }
  static Vec load(const uint32_t* p) { return widen(_mm512_loadu_si512(p)); }
  static Vec load(const uint32_t* p, __mmask16 tail) {
    return widen(_mm512_maskz_loadu_epi32(tail, p));
  }
  static __m512 dot(__m512 acc, Wide a, Vec b) {
    return _mm512_fmadd_ps(a.lo, b.lo, _mm512_fmadd_ps(a.hi, b.hi, acc));
  }
};

// DAZ and FTZ for the guard's lifetime, on this thread; the caller's MXCSR after.
class FlushSubnormals {
 public:
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kDaz | kFtz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  static constexpr unsigned kDaz = 0x0040, kFtz = 0x8000;
  unsigned saved_;
};

// row[0, n) *= f, outside the flushing region: a plain FP32 multiply, as dot2's callers do it.
void scale_row(float* row, int64_t n, float f) {
  const __m512 fv = _mm512_set1_ps(f);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = attention_regs::first_lanes(n - j);
    _mm512_mask_storeu_ps(row + j, lanes, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, row + j), fv));
  }
}

void scores(float* s, const uint32_t* x, int64_t x_stride, int64_t nq, const uint32_t* tile,
            int64_t hd, float scale, Visibility vis) {
  {
    const FlushSubnormals flush;
    bf16_tiles::scores<FmaDot>(s, x, x_stride, nq, tile, hd, 1.0f, vis);
  }
  for (int64_t r = 0; r < nq; ++r) scale_row(s + r * kKeyTile, vis.visible(r), scale);
}

void accumulate_rows(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                     const uint32_t* p, int64_t nq, const uint32_t* x, int64_t x_stride, int64_t hd,
                     Visibility vis) {
  if (alpha && !overwrite) {
    for (int64_t r = 0; r < nq; ++r) scale_row(y + r * y_stride, hd, alpha[r]);
  }
  const FlushSubnormals flush;
  bf16_tiles::accumulate_rows<FmaDot>(y, y_stride, nullptr, overwrite, p, nq, x, x_stride, hd, vis);
}

void accumulate_columns(float* y, int64_t y_stride, bool overwrite, const uint32_t* p, int64_t nq,
                        const uint32_t* x, int64_t x_stride, int64_t hd, Visibility vis) {
  const FlushSubnormals flush;
  bf16_tiles::accumulate_columns<FmaDot>(y, y_stride, overwrite, p, nq, x, x_stride, hd, vis);
}

}  // namespace

const Bf16Kernels& attention_bf16_fma_kernels() {
  static const Bf16Kernels k = [] {
    Bf16Kernels fma = bf16_tiles::kernels_with<FmaDot>();
    fma.scores = scores;
    fma.accumulate_rows = accumulate_rows;
    fma.accumulate_columns = accumulate_columns;
    return fma;
  }();
  return k;
}

}  // namespace fp8lm::cpu::avx512
