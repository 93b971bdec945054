#pragma once
// NVFP4's random Hadamard transform (RHT) on the weight gradient's inputs (TE's
// NVFP4BlockScaling, docs features/low_precision_training/nvfp4): dW = dyᵀ·x sums over tokens,
// so rotating each group of 16 tokens of both dy and x by the same orthogonal matrix leaves dW
// unchanged while spreading outliers across the group before the column-wise copies are
// quantized. The matrix is TE's: diag(signs) · H16 / 4, H16 the Sylvester Hadamard matrix and
// the signs TE's fixed vector (transformer_engine/pytorch/tensor/nvfp4_tensor.py,
// get_wgrad_sign_vector; get_rht_matrix). A row vector v of 16 becomes v · M:
//   y_j = 1/4 · Σ_i s_i · H_ij · v_i.
// Ours is computed in FP32 in a fixed order (signs, the four butterfly stages of the fast
// Walsh-Hadamard transform, then the exact 1/4); TE runs it as a BF16 tensor-core GEMM, so the
// transform's own rounding differs from TE's while the quantization after it follows TE's rules.
#include <array>
#include <cstdint>

namespace fp8lm {

inline constexpr int64_t kRhtSize = 16;
inline constexpr std::array<float, kRhtSize> kRhtSigns = {1,  1,  1,  -1, 1,  -1, -1, -1,
                                                          -1, -1, -1, 1,  -1, 1,  -1, -1};

// x and y [rows, cols] row-major, rows a multiple of 16: each column's groups of 16 rows
// transformed (y may not alias x). The fast version runs the butterflies on whole rows (the
// compiler vectorizes them across columns); the reference one column at a time. Bit-identical.
void rht16_rows(float* y, const float* x, int64_t rows, int64_t cols);
void rht16_rows_reference(float* y, const float* x, int64_t rows, int64_t cols);

// max |y| of rht16_rows(y, x, rows, cols), NaN left out, without writing y where the CPU can
// keep the transform in registers; where plain_amax is given, absmax(x) there too (on AVX-512
// from the same read of x).
float rht16_absmax(const float* x, int64_t rows, int64_t cols, float* plain_amax = nullptr);

}  // namespace fp8lm
