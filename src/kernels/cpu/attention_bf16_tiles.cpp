// The generic BF16 kernel set (attention_isa.h's Bf16Kernels): plain loops over dot2, the
// arithmetic the AVX512-BF16 set does in hardware, so the two give the same bits. It serves
// CPUs without that instruction, and the tests as the AVX512-BF16 set's twin.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/bf16.h"
#include "kernels/cpu/attention_isa.h"

namespace fp8lm::cpu::attention_tiles {
namespace {

int64_t round_up_16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// bf16_from_float's bits, a subnormal flushed to a zero of its sign: the instruction reads
// subnormal BF16 inputs as zero.
uint32_t flushed(uint32_t b) {
  return (b & 0x7f80u) == 0 ? b & 0x8000u : b;
}

uint32_t bf16_flushed(float x) {
  return flushed(bf16_from_float(x));
}

// The same of a BF16 value: what its FP32 widening would give (a NaN made quiet, as
// bf16_from_float makes it).
uint32_t bf16_flushed(bf16_t b) {
  return flushed((b & 0x7fffu) > 0x7f80u ? b | 0x40u : b);
}

template <class Src>
uint32_t pair(Src lo, Src hi) {
  return bf16_flushed(lo) | bf16_flushed(hi) << 16;
}

float low_of(uint32_t p) {
  return std::bit_cast<float>(p << 16);
}

float high_of(uint32_t p) {
  return std::bit_cast<float>(p & 0xffff0000u);
}

float flush(float x) {
  return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x;
}

template <class Src>
void pack_half_pairs(uint32_t* dst, int64_t dst_stride, const Src* src, int64_t src_stride,
                     int64_t n, int64_t hd) {
  const int64_t h = half_pairs(hd);
  for (int64_t r = 0; r < n; ++r) {
    const Src* x = src + r * src_stride;
    for (int64_t i = 0; i < h; ++i)
      dst[r * dst_stride + i] = pair(x[i], i + h < hd ? x[i + h] : Src{0});
  }
}

template <class Src>
void pack_tile_pairs(uint32_t* dst, const Src* rows, int64_t stride, int64_t n, int64_t hd) {
  const int64_t h = half_pairs(hd);
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < round_up_16(n); ++j) {
      const Src* x = rows + j * stride;
      dst[i * kKeyTile + j] = j < n ? pair(x[i], i + h < hd ? x[i + h] : Src{0}) : 0;
    }
  }
}

template <class Src>
void pack_row_pairs(uint32_t* dst, int64_t dst_stride, const Src* src, int64_t src_stride,
                    int64_t n, int64_t hd) {
  for (int64_t m = 0; 2 * m < n; ++m) {
    const Src* a = src + 2 * m * src_stride;
    const Src* b = 2 * m + 1 < n ? a + src_stride : nullptr;
    for (int64_t d = 0; d < hd; ++d) dst[m * dst_stride + d] = pair(a[d], b ? b[d] : Src{0});
  }
}

void pack_weight_rows(uint32_t* dst, const float* p, int64_t nq, Visibility vis) {
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t n = vis.visible(r);
    const float* w = p + r * kKeyTile;
    for (int64_t m = 0; 2 * m < vis.n; ++m) {
      dst[r * (kKeyTile / 2) + m] =
          pair(2 * m < n ? w[2 * m] : 0, 2 * m + 1 < n ? w[2 * m + 1] : 0);
    }
  }
}

void pack_weight_pairs(uint32_t* dst, const float* p, int64_t nq, Visibility vis) {
  for (int64_t m = 0; 2 * m < nq; ++m) {
    const float* a = p + 2 * m * kKeyTile;
    const float* b = 2 * m + 1 < nq ? a + kKeyTile : nullptr;
    for (int64_t j = 0; j < round_up_16(vis.n); ++j)
      dst[m * kKeyTile + j] = pair(a[j], b ? b[j] : 0);
  }
}

void scores(float* s, const uint32_t* x, int64_t x_stride, int64_t nq, const uint32_t* tile,
            int64_t hd, float scale, Visibility vis) {
  const int64_t h = half_pairs(hd);
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t j = 0; j < vis.visible(r); ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < h; ++i) acc = dot2(acc, x[r * x_stride + i], tile[i * kKeyTile + j]);
      s[r * kKeyTile + j] = acc * scale;
    }
  }
}

void accumulate_rows(float* y, int64_t y_stride, const float* alpha, bool overwrite,
                     const uint32_t* p, int64_t nq, const uint32_t* x, int64_t x_stride, int64_t hd,
                     Visibility vis) {
  for (int64_t r = 0; r < nq; ++r) {
    float* y_r = y + r * y_stride;
    for (int64_t d = 0; d < hd; ++d) y_r[d] = overwrite ? 0.0f : alpha ? y_r[d] * alpha[r] : y_r[d];
    for (int64_t m = 0; 2 * m < vis.visible(r); ++m) {
      const uint32_t w = p[r * (kKeyTile / 2) + m];
      for (int64_t d = 0; d < hd; ++d) y_r[d] = dot2(y_r[d], w, x[m * x_stride + d]);
    }
  }
}

void accumulate_columns(float* y, int64_t y_stride, bool overwrite, const uint32_t* p, int64_t nq,
                        const uint32_t* x, int64_t x_stride, int64_t hd, Visibility vis) {
  for (int64_t j = 0; j < vis.n; ++j) {
    float* y_j = y + j * y_stride;
    if (overwrite) std::fill(y_j, y_j + hd, 0.0f);
    for (int64_t m = std::max<int64_t>(0, j - vis.first + 1) / 2; 2 * m < nq; ++m) {
      const uint32_t w = p[m * kKeyTile + j];
      for (int64_t d = 0; d < hd; ++d) y_j[d] = dot2(y_j[d], w, x[m * x_stride + d]);
    }
  }
}

}  // namespace

float dot2(float acc, uint32_t a, uint32_t b) {
  acc = flush(std::fma(high_of(a), high_of(b), flush(acc)));
  return flush(std::fma(low_of(a), low_of(b), acc));
}

const Bf16Kernels& generic_bf16_kernels() {
  static const Bf16Kernels k{
      pack_half_pairs<float>,  pack_tile_pairs<float>,  pack_row_pairs<float>,
      pack_half_pairs<bf16_t>, pack_tile_pairs<bf16_t>, pack_row_pairs<bf16_t>,
      pack_weight_rows,        pack_weight_pairs,       scores,
      accumulate_rows,         accumulate_columns};
  return k;
}

}  // namespace fp8lm::cpu::attention_tiles
