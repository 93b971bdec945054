#include "cublaslt_rules.h"

namespace emu::detail {
namespace {

bool is_fp8(cudaDataType_t t) {
  return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

LtVerdict refuse(cublasStatus_t s, std::string why) {
  LtVerdict v;
  v.status = s;
  v.why = std::move(why);
  return v;
}

// rows x cols stored column-major with leading dimension ld (in elements).
bool layout_ok(const cublasLtMatrixLayoutOpaque_t& l) {
  return l.order == CUBLASLT_ORDER_COL && l.batch >= 1 &&
         l.ld >= static_cast<int64_t>(l.rows > 0 ? l.rows : 1);
}

// Tensor Core Usage: every leading dimension, every stored column and every batch stride a
// multiple of 16 bytes.
bool sixteen_byte_shaped(const cublasLtMatrixLayoutOpaque_t& l) {
  const int64_t e = element_bytes(l.type);
  return (static_cast<int64_t>(l.rows) * e) % 16 == 0 && (l.ld * e) % 16 == 0 &&
         (l.batch == 1 || (l.stride * e) % 16 == 0);
}

}  // namespace

cudaDataType_t effective_bias_type(const cublasLtMatmulDescOpaque_t& desc,
                                   const cublasLtMatrixLayoutOpaque_t& d, bool fp8) {
  if (desc.bias_type != -1) return static_cast<cudaDataType_t>(desc.bias_type);
  // The default is D's type, except for FP8 kernels writing FP32, whose bias is BF16.
  return fp8 && d.type == CUDA_R_32F ? CUDA_R_16BF : d.type;
}

uint32_t required_alignment(const cublasLtMatrixLayoutOpaque_t& layout, bool fp8) {
  return fp8 ? 16u : static_cast<uint32_t>(element_bytes(layout.type));
}

LtVerdict check_problem(const cublasLtMatmulDescOpaque_t& desc,
                        const cublasLtMatrixLayoutOpaque_t& a,
                        const cublasLtMatrixLayoutOpaque_t& b,
                        const cublasLtMatrixLayoutOpaque_t& c,
                        const cublasLtMatrixLayoutOpaque_t& d) {
  // Shapes: op(A) is m x k, op(B) k x n, C and D m x n.
  const auto op_ok = [](int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; };
  if (!op_ok(desc.transa) || !op_ok(desc.transb) || desc.transc != CUBLAS_OP_N)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "transpose must be N or T (C: N)");
  const bool ta = desc.transa == CUBLAS_OP_T, tb = desc.transb == CUBLAS_OP_T;
  LtShape s;
  s.m = static_cast<int64_t>(ta ? a.cols : a.rows);
  s.k = static_cast<int64_t>(ta ? a.rows : a.cols);
  s.n = static_cast<int64_t>(tb ? b.rows : b.cols);
  const auto k_b = static_cast<int64_t>(tb ? b.cols : b.rows);
  if (k_b != s.k || static_cast<int64_t>(c.rows) != s.m || static_cast<int64_t>(c.cols) != s.n ||
      d.rows != c.rows || d.cols != c.cols)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the layouts' sizes do not make one product");
  if (!layout_ok(a) || !layout_ok(b) || !layout_ok(c) || !layout_ok(d))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "a layout is not column-major with ld >= rows and batch >= 1");
  if (a.batch != b.batch || a.batch != c.batch || c.batch != d.batch)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ between A, B, C and D");
  if (c.type != d.type || c.ld != d.ld || c.stride != d.stride)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "C and D differ in type, leading dimension or batch stride");

  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale_type != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "only CUBLAS_COMPUTE_32F with CUDA_R_32F scale is emulated");
  if (desc.pointer_mode != 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only host alpha/beta is emulated");

  // The data-type table: FP32 x FP32 -> FP32; BF16 x BF16 -> BF16 or FP32; FP8 x FP8 (not
  // E5M2 x E5M2) -> FP32 or BF16.
  s.fp8 = is_fp8(a.type) && is_fp8(b.type);
  if (s.fp8) {
    if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 E5M2 x E5M2 is not supported");
    if (c.type != CUDA_R_32F && c.type != CUDA_R_16BF)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 output other than FP32/BF16 not emulated");
    // Hopper and Ada FP8 kernels: "A must be transposed and B non-transposed (TN)".
    if (!ta || tb)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 needs transa = T and transb = N (TN)");
    if (!sixteen_byte_shaped(a) || !sixteen_byte_shaped(b) || !sixteen_byte_shaped(c))
      return refuse(
          CUBLAS_STATUS_NOT_SUPPORTED,
          "FP8: rows, leading dimensions and batch strides must be multiples of 16 bytes");
  } else if (a.type == CUDA_R_32F && b.type == CUDA_R_32F) {
    if (c.type != CUDA_R_32F)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP32 inputs need an FP32 output");
  } else if (a.type == CUDA_R_16BF && b.type == CUDA_R_16BF) {
    if (c.type != CUDA_R_32F && c.type != CUDA_R_16BF)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "BF16 inputs need an FP32 or BF16 output");
  } else {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "this combination of A and B types");
  }
  // Hopper's FP8 block scaling (cc 9.0, CUDA >= 12.9; the emulated device is an sm_90): 1D x
  // 1D, 1D x 2D or 2D x 1D, the scales FP32 dequantization factors, split accumulation only.
  const auto scalar = [](int32_t m) { return m == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F; };
  const auto block = [](int32_t m) {
    return m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
           m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  };
  if (!scalar(desc.a_scale_mode) || !scalar(desc.b_scale_mode)) {
    if (!block(desc.a_scale_mode) || !block(desc.b_scale_mode))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "scale modes other than scalar, VEC128_32F and BLK128x128_32F (on both A and "
                    "B) are not supported on sm_90");
    if (desc.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
        desc.b_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "BLK128x128_32F on both A and B");
    if (!s.fp8) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "block scale modes need FP8 A and B");
    if (desc.fast_accum)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "fast accumulation with block scale modes");
    if (s.m % 4 != 0 || s.n % 4 != 0)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "block scale modes need M and N multiples of 4");
    if (a.batch != 1)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "batched block-scaled GEMMs are not emulated");
    if (!desc.a_scale || !desc.b_scale)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "block scale modes need A and B scale pointers");
    s.block_scaled = true;
  }
  if (!s.fp8 && (desc.a_scale || desc.b_scale || desc.c_scale || desc.d_scale || desc.amax_d))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "scale pointers are for FP8 problems");
  if (desc.d_scale || desc.c_scale || desc.amax_d)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C/D scales and amax of D are not emulated");

  if (desc.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    // The bias is the type of D, except FP8 kernels: BF16 with an FP32 or BF16 D.
    const cudaDataType_t bias = effective_bias_type(desc, d, s.fp8);
    const cudaDataType_t allowed = s.fp8 ? CUDA_R_16BF : d.type;
    if (bias != allowed)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "bias data type not allowed for this D type");
  } else if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogues other than DEFAULT and BIAS");
  }
  LtVerdict v;
  v.shape = s;
  return v;
}

int64_t block_scale_count(int32_t mode, int64_t outer, int64_t k) {
  const int64_t kb = (k + 127) / 128;
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return outer * kb;
  return (outer + 127) / 128 * ((kb + 3) / 4 * 4);
}

int64_t block_scale_index(int32_t mode, int64_t i, int64_t kk, int64_t outer, int64_t k) {
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return i + kk / 128 * outer;
  const int64_t l4 = ((k + 127) / 128 + 3) / 4 * 4;
  return kk / 128 + i / 128 * l4;
}

}  // namespace emu::detail
