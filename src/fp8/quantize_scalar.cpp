// The scalar twin: one element at a time through the bit codec. The SIMD variants must match
// it bit for bit, and it in turn is checked against the double-precision minifloat reference.
#include <algorithm>
#include <cmath>

#include "core/counter_rng.h"
#include "core/e2m1.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// decoded (where not null) gets each code's value as BF16.
template <DType F>
CastStats quantize_one_format(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                              float scale, bool saturate) {
  CastStats s;
  for (int64_t i = 0; i < n; ++i) {
    bool sat = false, flush = false;
    codes[i] = fp8_encode<F>(x[i] * scale, saturate, &sat, &flush);
    if (decoded) decoded[i] = bf16_from_float(fp8_decode(codes[i], F));
    s.amax = max_ignoring_nan(std::fabs(x[i]), s.amax);
    s.saturated += sat;
    s.flushed += flush;
  }
  return s;
}

CastStats quantize_scalar(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                          DType format, bool saturate) {
  return format == DType::E4M3
             ? quantize_one_format<DType::E4M3>(codes, decoded, x, n, scale, saturate)
             : quantize_one_format<DType::E5M2>(codes, decoded, x, n, scale, saturate);
}

void dequantize_scalar(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
  const auto& table = fp8_decode_table(format);
  for (int64_t i = 0; i < n; ++i) y[i] = table[codes[i]] * scale_inv;
}

float absmax_scalar(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = max_ignoring_nan(std::fabs(x[i]), m);
  return m;
}

void e2m1_quantize_scalar(uint8_t* codes, const float* x, int64_t n, float multiplier,
                          const uint32_t* sr_key, uint32_t first_index) {
  if (sr_key) {
    for (int64_t i = 0; i < n; ++i)
      codes[i] = e2m1_encode_stochastic(
          x[i] * multiplier, counter_bits(*sr_key, first_index + static_cast<uint32_t>(i)));
  } else {
    for (int64_t i = 0; i < n; ++i) codes[i] = e2m1_encode(x[i] * multiplier);
  }
}

void expand_to_bf16_scalar(bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                           DType format) {
  const float* table = decode_table(format);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_from_float(table[codes[i]] * scale[i]);
}

void row_block_absmax_scalar(float* amax, const float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b * block < n; ++b) {
    float m = amax[b];
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      m = max_ignoring_nan(std::fabs(x[i]), m);
    amax[b] = m;
  }
}

void fp8_round_to_bf16_scalar(bf16_t* out, const float* x, const float* scale, int64_t n,
                              DType format) {
  const float* table = fp8_decode_table(format).data();
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16_from_float(table[fp8_encode(x[i], format)] * scale[i]);
}

// The fused casts' twins: the two passes they fuse.
void fp8_cast_to_bf16_scalar(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                             int64_t n, DType format) {
  quantize_scalar(codes, nullptr, x, n, 1.0f, format, true);
  expand_to_bf16_scalar(out, codes, scale, n, format);
}

void e2m1_cast_to_bf16_scalar(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                              int64_t n, const uint32_t* sr_key, uint32_t first_index) {
  e2m1_quantize_scalar(codes, x, n, 1.0f, sr_key, first_index);
  expand_to_bf16_scalar(out, codes, scale, n, DType::E2M1);
}

}  // namespace

const CastKernels kScalarCasts{
    quantize_scalar,         dequantize_scalar,        absmax_scalar,
    e2m1_quantize_scalar,    expand_to_bf16_scalar,    row_block_absmax_scalar,
    fp8_cast_to_bf16_scalar, e2m1_cast_to_bf16_scalar, fp8_round_to_bf16_scalar};

}  // namespace fp8lm::isa
