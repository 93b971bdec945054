#pragma once
// The per-ISA kernels behind quantize.h; each lives in a file compiled for its ISA.
#include "core/e2m1.h"
#include "fp8/quantize.h"

namespace fp8lm::isa {

// The kernels behind quantize.h, one table per instruction set, each filled in the file compiled
// for its ISA (quantize_scalar.cpp, quantize_avx2.cpp, quantize_avx512.cpp).
struct CastKernels {
  // decoded (where not null) also gets each code's value as BF16; the scalar table's is the
  // definition.
  CastStats (*quantize)(uint8_t* codes, bf16_t* decoded, const float* x, int64_t n, float scale,
                        DType format, bool saturate);
  void (*dequantize)(float* y, const uint8_t* codes, int64_t n, float scale_inv, DType format);
  float (*absmax)(const float* x, int64_t n);
  void (*e2m1_quantize)(uint8_t* codes, const float* x, int64_t n, float multiplier,
                        const uint32_t* sr_key, uint32_t first_index);
  void (*expand_to_bf16)(bf16_t* out, const uint8_t* codes, const float* scale, int64_t n,
                         DType format);
  void (*row_block_absmax)(float* amax, const float* x, int64_t n, int64_t block);
  // The fused block-operand casts; the scalar table's are the passes they fuse (their twins).
  void (*fp8_cast_to_bf16)(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                           int64_t n, DType format);
  void (*e2m1_cast_to_bf16)(uint8_t* codes, bf16_t* out, const float* x, const float* scale,
                            int64_t n, const uint32_t* sr_key, uint32_t first_index);
  // fp8_round_to_bf16's definition (scalar): the decoded saturating code times the scale.
  void (*fp8_round_to_bf16)(bf16_t* out, const float* x, const float* scale, int64_t n,
                            DType format);
};
extern const CastKernels kScalarCasts, kAvx2Casts, kAvx512Casts;

// Float8BlockScaling's row-wise (1x128) operand cast with power-of-two scales, no codes:
// scale_inv one per block (fp8/fp8_block_quantize.h's rule, TE's amax_epsilon).
void fp8_block_rows_avx512(float* scale_inv, bf16_t* operand, const float* x, int64_t rows,
                           int64_t cols, DType format, float amax_epsilon);

// NVFP4's 1D casts under the global encode scale S (fp8/nvfp4_quantize.h), each block in
// registers: rows [rows, cols] in 1x16 blocks (scales: ceil(cols / 16) per row), or one stripe
// of at most 16 rows in 16x1 blocks (scales: one per column), taken through the 16-point
// Hadamard transform first where rht (16 rows). codes may be null; element i (from x) draws
// its stochastic rounding at first_index + i.
void nvfp4_rows_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                       int64_t rows, int64_t cols, float global_encode, const uint32_t* sr_key,
                       int64_t first_index);
void nvfp4_columns_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                          int64_t rows, int64_t cols, float global_encode, bool rht,
                          const uint32_t* sr_key, int64_t first_index);
// NVFP4's 16x16 blocks (the 2D weight quantization) on one stripe of at most 16 rows (scales:
// ceil(cols / 16)), each block's amax in registers.
void nvfp4_tiles_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                        int64_t rows, int64_t cols, float global_encode, const uint32_t* sr_key,
                        int64_t first_index);
// block_cast_pair's NVFP4 pair (the column-wise copy through the transform) on a stripe of
// whole groups of 16 rows, in two sweeps. nvfp4_pair_amaxes_avx512 keeps every block's amax:
// row_amax[16 (group x ceil(cols / 16) + tile) + r] row r's block of the 16 x 16 tile, col_amax
// [group x cols + column] the column's block of the transform; it returns the transform's
// maximum, x's into *plain_amax. The casts then take each block's scale from its amax, under
// S, the bits of nvfp4_rows_avx512 and nvfp4_columns_avx512 (rht).
float nvfp4_pair_amaxes_avx512(const float* x, int64_t rows, int64_t cols, float* row_amax,
                               float* col_amax, float* plain_amax);
void nvfp4_rows_from_amaxes_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                                   int64_t rows, int64_t cols, float global_encode,
                                   const uint32_t* sr_key, int64_t first_index,
                                   const float* row_amax);
void nvfp4_columns_from_amaxes_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand,
                                      const float* x, int64_t rows, int64_t cols,
                                      float global_encode, const uint32_t* sr_key,
                                      int64_t first_index, const float* col_amax);
// MXFP8's casts (fp8/mx_quantize.h), each block in registers: rows [rows, cols] in 1x32 blocks
// (scales: ceil(cols / 32) per row), or one stripe of at most 32 rows in 32x1 blocks (scales:
// one per column). codes may be null.
void mxfp8_rows_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                       int64_t rows, int64_t cols, DType format);
void mxfp8_columns_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                          int64_t rows, int64_t cols, DType format);
// out[i] = the BF16 of fp8_round(x[i] * mult[b]) * scale[b] for i in block b = i / block:
// fp8_round_to_bf16 of x * mult with one multiplier and one scale per run of `block` values
// (Float8BlockScaling's row-wise blocks), in one sweep; block 1: a multiplier and a scale per
// value (a row of its column-wise blocks). The scales are powers of two.
void fp8_round_blocks_to_bf16_avx512(bf16_t* out, const float* x, const float* mult,
                                     const float* scale, int64_t n, int64_t block, DType format);
// max |rht16_rows(x)|, the transform never written (and max |x| from the same loads into
// *plain_amax where given: AVX-512 only).
float rht16_absmax_avx512(const float* x, int64_t rows, int64_t cols, float* plain_amax);
float rht16_absmax_avx2(const float* x, int64_t rows, int64_t cols);
// rht16_rows with each group's sixteen rows in registers, eight columns at a time.
void rht16_rows_avx2(float* y, const float* x, int64_t rows, int64_t cols);

// Each code's value: the expand kernels' lookup.
inline const float* decode_table(DType f) {
  return f == DType::E2M1   ? kE2M1Values.data()
         : f == DType::E4M3 ? fp8_decode_table(DType::E4M3).data()
                            : fp8_decode_table(DType::E5M2).data();
}

// max that ignores a NaN in v (same semantics as x86 maxps(v, acc)).
inline float max_ignoring_nan(float v, float acc) {
  return v > acc ? v : acc;
}

}  // namespace fp8lm::isa
