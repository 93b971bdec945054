#pragma once
// Quantize FP32 to FP8 with a per-tensor scale, in one pass that also takes the amax and
// counts what the cast lost (docs/reference/numerics.md): q = cast(x * scale), amax = max|x| of
// the unscaled input (NaN ignored, Inf counted). Every ISA variant gives the same bits as the
// scalar one.
#include <cstdint>
#include <string_view>

#include "core/bf16.h"
#include "core/fp8_dtype.h"

namespace fp8lm {

struct CastStats {
  float amax = 0.0f;      // max |x| before scaling; NaN ignored, Inf counted
  int64_t saturated = 0;  // |x * scale| rounded past the format's max, or was ±Inf
  int64_t flushed = 0;    // x * scale was non-zero and became ±0
};

enum class Isa { Scalar, Avx2, Avx512 };

std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);  // this CPU (and OS) can run the variant
Isa best_isa();

// Runtime-dispatched to the best supported ISA.
CastStats quantize(uint8_t* codes, const float* x, int64_t n, float scale, DType format,
                   bool saturate = true);
// quantize (saturating) that also stores each code's value as BF16 in decoded: bf16_from_float
// of fp8_decode, which is exact (every E4M3 and E5M2 value is a BF16 value). From the codes
// still in registers: a BF16 GEMM's operand without a second pass over them.
CastStats quantize_decoded(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                           DType format);
// y = decode(code) * scale_inv, element-wise.
void dequantize(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format);
// max |x|, NaN ignored: the first pass of current scaling.
float absmax(const float* x, int64_t n);

// One variant explicitly (tests and benchmarks). Calling an unsupported ISA is a bug.
CastStats quantize(Isa isa, uint8_t* codes, const float* x, int64_t n, float scale, DType format,
                   bool saturate = true);
CastStats quantize_decoded(Isa isa, uint8_t* codes, bf16_t* decoded, const float* x, int64_t n,
                           float scale, DType format);
void dequantize(Isa isa, float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format);
float absmax(Isa isa, const float* x, int64_t n);

// E2M1 codes (core/e2m1.h, one per byte in the low 4 bits) of x * multiplier, rounded to
// nearest even; or, with an sr key, stochastically with value i drawing
// counter_bits(*sr_key, first_index + i) (core/counter_rng.h): the draw depends on the value's
// place in its tensor, not on how a kernel splits it.
void e2m1_quantize(Isa isa, uint8_t* codes, const float* x, int64_t n, float multiplier,
                   const uint32_t* sr_key = nullptr, int64_t first_index = 0);

// For a row of n values cut into blocks of `block` (the last one shorter where n is not a
// multiple): amax[b] = max(amax[b], max |x| over block b), NaN left out. The block quantizers'
// first sweep (fp8/block_grid.h), a row at a time.
void row_block_absmax(Isa isa, float* amax, const float* x, int64_t n, int64_t block);

// codes[i] = the saturating FP8 code of x[i] (quantize at scale 1), and out[i] = the BF16 of
// decode(codes[i]) * scale[i] (expand_to_bf16): a block-scaled operand's codes and BF16 values
// in one pass, the codes never read back. The same bits as those two calls.
void fp8_cast_to_bf16(Isa isa, uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                      int64_t n, DType format);

// out[i] as fp8_cast_to_bf16 makes it, without the codes: x[i] rounded to the format's values
// in the float domain (the encoder's rounding, keeping the bits a code would drop as zeros).
// For the GEMM operands whose codes nothing reads.
void fp8_round_to_bf16(Isa isa, bf16_t* out, const float* x, const float* scale, int64_t n,
                       DType format);

// codes = e2m1_quantize(x) at multiplier 1 (nearest, or stochastically with sr_key), and out[i]
// = the BF16 of their values times scale[i]: NVFP4's fp8_cast_to_bf16.
void e2m1_cast_to_bf16(Isa isa, uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                       int64_t n, const uint32_t* sr_key = nullptr, int64_t first_index = 0);

// out[i] = the BF16 of decode(codes[i]) * scale[i], rounded to nearest even: a block-scaled
// GEMM's operand from its codes and each value's block scale (fp8/block_cast.h). E2M1 codes
// are one per byte, below 16.
void expand_to_bf16(Isa isa, bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                    DType format);

}  // namespace fp8lm
