// NVFP4's 16-point Hadamard transform (fp8/hadamard.h) in registers (AVX2): the sixteen rows
// of a group load together, eight columns at a time, and the signs, the four butterfly stages
// and the 1/4 run on them as hadamard.cpp's fast version runs them on whole rows: the same float
// operations in the same order, so the same bits, without five more passes over memory.
#include <immintrin.h>

#include <algorithm>

#include "fp8/hadamard.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// One butterfly stage: rows j and j + h for each j whose bit h is clear.
template <int H>
[[gnu::always_inline]] inline void butterfly_stage(__m256 (&v)[16]) {
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    if (j & H) continue;
    const __m256 a = v[j], b = v[j + H];
    v[j] = _mm256_add_ps(a, b);
    v[j + H] = _mm256_sub_ps(a, b);
  }
}

// Unrolled and inlined so that the rows stay in registers.
[[gnu::always_inline]] inline void rht16_lanes(__m256 (&v)[16]) {
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = _mm256_mul_ps(v[i], _mm256_set1_ps(kRhtSigns[i]));
  butterfly_stage<1>(v);
  butterfly_stage<2>(v);
  butterfly_stage<4>(v);
  butterfly_stage<8>(v);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = _mm256_mul_ps(v[i], _mm256_set1_ps(0.25f));
}

// use(first row, first column, live lanes, v) for each run of eight columns of each group of
// sixteen rows, transformed; a short last run loads zeros in its dead lanes (vmaskmovps).
template <class Use>
void for_each_transformed_run(const float* x, int64_t rows, int64_t cols, Use use) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t g = 0; g < rows; g += kRhtSize) {
    for (int64_t c0 = 0; c0 < cols; c0 += 8) {
      const bool full = c0 + 8 <= cols;
      const __m256i live = _mm256_cmpgt_epi32(
          _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(cols - c0, 8))), lane);
      __m256 v[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        const float* p = x + (g + r) * cols + c0;
        v[r] = full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, live);
      }
      rht16_lanes(v);
      use(g, c0, full, live, v);
    }
  }
}

}  // namespace

void rht16_rows_avx2(float* y, const float* x, int64_t rows, int64_t cols) {
  for_each_transformed_run(
      x, rows, cols, [&](int64_t g, int64_t c0, bool full, __m256i live, const __m256(&v)[16]) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          float* p = y + (g + r) * cols + c0;
          if (full) {
            _mm256_storeu_ps(p, v[r]);
          } else {
            _mm256_maskstore_ps(p, live, v[r]);
          }
        }
      });
}

// maxps(|v|, acc) keeps acc where v is NaN: the NaN is left out, as absmax leaves it.
float rht16_absmax_avx2(const float* x, int64_t rows, int64_t cols) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for_each_transformed_run(x, rows, cols,
                           [&](int64_t, int64_t, bool, __m256i, const __m256(&v)[16]) {
#pragma GCC unroll 16
                             for (int r = 0; r < 16; ++r)
                               amax = _mm256_max_ps(_mm256_and_ps(v[r], abs_mask), amax);
                           });
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  return *std::max_element(lanes, lanes + 8);
}

}  // namespace fp8lm::isa
