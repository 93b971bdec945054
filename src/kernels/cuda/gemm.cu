// gemm.h through cuBLASLt (gemm_plan.h). cuBLASLt is column-major, and a row-major [R, C]
// buffer is the column-major C x R matrix, i.e. its transpose, with leading dimension C. So
// C = op(A) op(B) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ: our B goes into cuBLASLt's A slot with
// transa = tb, our A into its B slot with transb = ta, m = N, n = M, and D = Cᵀ comes out as
// the row-major C. FP8's only call, ta = N and tb = T, thereby becomes cuBLASLt's "TN", and
// each operand's scale pointer moves with it.
//
// Arguments are checked before any CUDA call, so misuse is reported the same with or without a
// GPU.
#include <atomic>
#include <climits>
#include <cstdint>
#include <sstream>
#include <string>

#include "kernels/cuda/block_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/grid.cuh"

namespace fp8lm::cuda {
namespace {

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::E4M3:
      return CUDA_R_8F_E4M3;
    case DType::E5M2:
      return CUDA_R_8F_E5M2;
    default:
      break;  // refused by check_operands before any descriptor is made
  }
  return CUDA_R_32F;
}

cublasOperation_t lt_op(Trans t) {
  return t == Trans::T ? CUBLAS_OP_T : CUBLAS_OP_N;
}
const char* trans_name(Trans t) {
  return t == Trans::T ? "T" : "N";
}

std::string sizes(int64_t M, int64_t N, int64_t K) {
  return cat("M=", M, " N=", N, " K=", K);
}

void check_gemm_args(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const GemmOperand& A,
                     const GemmOperand& B) {
  if (M < 0 || N < 0 || K < 0) throw Error(cat("cuda::gemm: negative size ", sizes(M, N, K)));
  const auto is_float = [](DType t) { return t == DType::F32 || t == DType::BF16 || is_fp8(t); };
  const bool fp8 = is_fp8(A.type);
  if (!is_float(A.type) || !is_float(B.type) || fp8 != is_fp8(B.type) || (!fp8 && A.type != B.type))
    throw Error(cat("cuda::gemm: operand types ", dtype_name(A.type), " and ", dtype_name(B.type),
                    " do not mix (both F32, both BF16, or both FP8)"));
  if (!fp8) return;
  if (ta != Trans::N || tb != Trans::T)
    throw Error(cat("cuda::gemm: FP8 operands need ta=N tb=T (C = A·Bᵀ, cuBLASLt's TN), got ta=",
                    trans_name(ta), " tb=", trans_name(tb),
                    "; pass transposed codes (transpose_fp8)"));
  if (A.type == DType::E5M2 && B.type == DType::E5M2)
    throw Error("cuda::gemm: e5m2 x e5m2 is not supported by cuBLASLt; one operand must be e4m3");
  if (M % 16 != 0 || N % 16 != 0 || K % 16 != 0)
    throw Error(cat("cuda::gemm: FP8 sizes must be multiples of 16, got ", sizes(M, N, K)));
  if (reinterpret_cast<uintptr_t>(A.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(B.data) % 16 != 0)
    throw Error("cuda::gemm: FP8 operands must be 16-byte aligned");
}

void require_cc(int need, const char* what) {
  const int cc = current_device_cc();
  if (cc < need)
    throw Error(cat("cuda::gemm: ", what, " GEMMs need compute capability ", need / 10, ".",
                    need % 10, ", this device has ", cc / 10, ".", cc % 10));
}

// C = beta * C, C not read when beta = 0: the whole product when K = 0.
__global__ void scale_kernel(float* C, int64_t n, float beta) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    C[i] = beta == 0.0f ? 0.0f : __fmul_rn(beta, C[i]);
}

__global__ void product_scaled_kernel(float* C, const float* P, int64_t n, const float* sa,
                                      const float* sb, float beta) {
  const float s = __fmul_rn(sa ? *sa : 1.0f, sb ? *sb : 1.0f);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = __fmul_rn(s, P[i]);
    C[i] = beta == 0.0f ? v : __fadd_rn(v, __fmul_rn(beta, C[i]));
  }
}

// The cuBLASLt problem of the row-major C[M, N] = alpha op(A) op(B) + beta C: the operands
// trade places, and with them their transposes and M and N (see the top of this file).
LtProblem swapped_problem(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                          float beta) {
  LtProblem p;
  p.transa = lt_op(tb);
  p.transb = lt_op(ta);
  p.m = N;
  p.n = M;
  p.k = K;
  p.alpha_nonzero = alpha != 0.0f;
  p.beta_nonzero = beta != 0.0f;
  return p;
}

// cublasLtMatmulMatrixScale_t's block modes (cublasLt.h of CUDA >= 12.9), named here so that
// this file builds with older headers too, where block_scaled_gemm_available() is false.
constexpr int32_t kVec128 = 4, kBlk128x128 = 5;

std::atomic<int64_t> g_block_scaled_runs{0};

void scale(float* C, int64_t n, float beta, cudaStream_t stream) {
  constexpr int kThreads = 256;
  scale_kernel<<<grid_stride_blocks(n, kThreads, 4096), kThreads, 0, stream>>>(C, n, beta);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void product_scaled_into(float* C, const float* P, int64_t n, const float* sa, const float* sb,
                         float beta, cudaStream_t stream) {
  constexpr int kThreads = 256;
  product_scaled_kernel<<<grid_stride_blocks(n, kThreads, 4096), kThreads, 0, stream>>>(C, P, n, sa,
                                                                                        sb, beta);
  FP8LM_CUDA_CHECK_LAUNCH();
}

size_t gemm_workspace_bytes() {
  return lt_workspace_bytes(current_device_cc());
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A,
          GemmOperand B, float beta, float* C, cudaStream_t stream) {
  check_gemm_args(ta, tb, M, N, K, A, B);
  if (M == 0 || N == 0) return;
  const bool fp8 = is_fp8(A.type);
  if (fp8) require_cc(89, "FP8");
  if (A.type == DType::BF16) require_cc(80, "BF16");
  if (K == 0) {  // alpha times an empty sum
    scale(C, M * N, beta, stream);
    return;
  }

  LtProblem p = swapped_problem(ta, tb, M, N, K, alpha, beta);
  p.atype = lt_type(B.type);
  p.btype = lt_type(A.type);
  p.ctype = CUDA_R_32F;
  p.lda = tb == Trans::N ? N : K;  // the row length of B as stored
  p.ldb = ta == Trans::N ? K : M;
  p.ldc = N;
  p.fp8 = fp8;

  const LtOperands ops{B.data, A.data, C, B.scale_inv, A.scale_inv};
  lt_run(lt_plan(p, ops), ops, alpha, beta, stream);
}

void gemm_batched_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb,
                       int64_t stride_b, float beta, void* C, bool c_bf16, int64_t ldc,
                       int64_t stride_c, int64_t batch, cudaStream_t stream) {
  if (M < 0 || N < 0 || K < 0 || batch < 0 || batch > INT32_MAX)
    throw Error(cat("cuda::gemm_batched_bf16: bad size ", sizes(M, N, K), " batch=", batch));
  const int64_t a_row = ta == Trans::N ? K : M, b_row = tb == Trans::N ? N : K;
  if (lda < a_row || ldb < b_row || ldc < N)
    throw Error(cat("cuda::gemm_batched_bf16: leading dimensions lda=", lda, " ldb=", ldb,
                    " ldc=", ldc, " shorter than the rows they step over (", a_row, ", ", b_row,
                    ", ", N, ")"));
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) throw Error("cuda::gemm_batched_bf16: K=0 is not supported");
  require_cc(80, "BF16");

  LtProblem p = swapped_problem(ta, tb, M, N, K, alpha, beta);
  p.atype = CUDA_R_16BF;
  p.btype = CUDA_R_16BF;
  p.ctype = c_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  p.lda = ldb;
  p.ldb = lda;
  p.ldc = ldc;
  p.batch = batch;
  p.stride_a = stride_b;
  p.stride_b = stride_a;
  p.stride_c = stride_c;

  const LtOperands ops{B, A, C};
  lt_run(lt_plan(p, ops), ops, alpha, beta, stream);
}

bool gemm_block_scaled(int64_t M, int64_t N, int64_t K, float alpha, const BlockScaledOperand& A,
                       const BlockScaledOperand& B, float beta, float* C, cudaStream_t stream) {
  LtProblem p = swapped_problem(Trans::N, Trans::T, M, N, K, alpha, beta);
  p.atype = lt_type(B.type);
  p.btype = lt_type(A.type);
  p.ctype = CUDA_R_32F;
  p.lda = K;
  p.ldb = K;
  p.ldc = N;
  p.fp8 = true;
  p.scale_mode_a = B.two_d ? kBlk128x128 : kVec128;
  p.scale_mode_b = A.two_d ? kBlk128x128 : kVec128;

  const LtOperands ops{B.codes, A.codes, C, B.scales, A.scales};
  LtPlan* plan = lt_plan_if_any(p, ops);
  if (!plan) return false;
  lt_run(*plan, ops, alpha, beta, stream);
  g_block_scaled_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t block_scaled_gemms_run() {
  return g_block_scaled_runs.load(std::memory_order_relaxed);
}

}  // namespace fp8lm::cuda
