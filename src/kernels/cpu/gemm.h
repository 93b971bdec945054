#pragma once
// Matrix products for every precision, through oneDNN's matmul (primitives cached per shape).
// Row-major: C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, where op(X) is X or Xᵀ
// (a transposed operand is stored with its dimensions swapped). Accumulation is FP32.
//
// BF16 and FP8 operands are multiplied exactly (every product of two such values is an FP32
// value) and summed in FP32, by one of two engines: oneDNN's native BF16 kernels (AVX512-BF16
// dot products, AMX), or widening both operands to FP32 in a per-thread workspace and running
// the FP32 kernel. The second wins where the BF16 instruction is slower than FP32 FMAs; on
// this project's Xeon VM, vdpbf16ps gives 82 GFLOP/s per core against 170 for vfmadd231ps.
// The engine is measured once per process (low_precision_engine()); the two differ only in
// summation order.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/bf16.h"
#include "core/fp8_dtype.h"
#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm::cpu {

// bias (where given): one per column of C, added after the product (C's rows += bias, in the same
// pass as alpha's where the product has one: the bits of cpu::add_bias after it).
void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              const float* B, float beta, float* C, const float* bias = nullptr);

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
               const bf16_t* B, float beta, float* C, const float* bias = nullptr);

// FP8 operands (codes) as BF16 dot products: every E4M3/E5M2 value is exact in BF16 and each
// product exact in FP32, so this emulates an FP8 GEMM with FP32 accumulation exactly up to
// summation order. Pass alpha = scale_inv_A * scale_inv_B to dequantize the result. Codes are
// decoded inside the call, except an operand whose decoded values come with it (A16, B16: the
// cast wrote them beside the codes, Fp8Out::decoded): the same products without the decode.
void gemm_fp8(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const uint8_t* A,
              DType fa, const uint8_t* B, DType fb, float beta, float* C,
              const bf16_t* A16 = nullptr, const bf16_t* B16 = nullptr,
              const float* bias = nullptr);

// The entry every backend shares (kernels/cuda/gemm.h takes the same operands in device
// memory): the operands' dtypes pick gemm_f32, gemm_bf16 or gemm_fp8, whose two scale_invs
// fold into the output scale as alpha * sa * sb. Operands are F32×F32, BF16×BF16 or FP8×FP8
// (any mix of E4M3 and E5M2); anything else throws Error. Counts the call's traffic.
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A,
          const GemmOperand& B, float beta, float* C, const float* bias = nullptr);

enum class LowPrecisionEngine { NativeBf16, WidenToFp32 };
std::string_view engine_name(LowPrecisionEngine e);
// Chosen on first use: FP8LM_GEMM_ENGINE=native|widen if set; else native with AMX tiles;
// else native where this core's vdpbf16ps issues more than 1.2x the FLOPs of its FP32 FMAs
// (bf16_probe.h; e.g. AMD Zen 4), widen where it does not (this project's Xeon VM: 0.5x) or
// where there is no AVX512-BF16. bench_gemm times both engines on full GEMMs.
LowPrecisionEngine low_precision_engine();
// oneDNN's implementation of the chosen engine's matmul (x · Wᵀ at 2048^3, and at K = 512
// where that differs), e.g. "gemm:jit; at 32 <= K <= 512: brg:avx512_core_amx_bf16" with AMX
// tiles, "brg:avx512_core_bf16" or "gemm:jit": what runs.
std::string engine_implementation();
// The same for one product of the chosen engine.
std::string gemm_implementation(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float beta);
// Whether BF16 products may run on oneDNN's brgemm kernels where they give gemm:jit's bits
// (gemm.cpp's on_brgemm; the default). Off, every one runs on gemm:jit: the tests compare them.
void allow_bf16_brgemm(bool allowed);
void set_low_precision_engine(LowPrecisionEngine e);

// Time and FLOPs (2·M·N·K) spent in the products above since the last reset: the bench's
// "achieved GEMM GFLOP/s". Counted on the calling thread.
struct GemmStats {
  double seconds = 0;
  double flops = 0;
  // FP8 values gemm_fp8 decoded from codes itself (none for an operand whose decoded values
  // came with it).
  int64_t fp8_values_decoded = 0;
};
GemmStats gemm_stats();
// True while this thread is inside oneDNN's primitive execute, whose bookkeeping allocates a
// few small objects per call (everything else a steady-state step needs is preallocated);
// the allocation test uses it to tell those apart from ours.
bool inside_onednn_execute();

// Bytes of this thread's operand workspaces (the widened or decoded copies).
size_t gemm_workspace_bytes();
void reset_gemm_stats();

// The operand conversions GEMM callers use (fp32_to_bf16, ...) are in casts.h.

namespace ref {
// Plain loops with double accumulation: the oracle for every precision (operands decoded
// to float first).
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
}  // namespace ref

}  // namespace fp8lm::cpu
