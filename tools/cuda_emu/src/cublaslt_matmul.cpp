// cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul. The heuristic offers a single algorithm
// where check_problem accepts the problem and the preference's promised alignments suffice; the
// algorithm remembers those alignments, and cublasLtMatmul refuses pointers that break them
// (as a real kernel chosen for them would fault or misbehave). Every pointer must be device
// memory covering the whole matrix.
#include <cstring>

#include "cublaslt_objects.h"
#include "cublaslt_rules.h"
#include "reference_gemm.h"
#include "report.h"
#include "runtime_state.h"

namespace emu::detail {
namespace {

constexpr uint64_t kAlgoMagic = 0x656d752d616c676full;  // "emu-algo"

struct AlgoInfo {
  uint32_t align_a, align_b, align_c, align_d;
};

void pack(cublasLtMatmulAlgo_t& algo, const AlgoInfo& info) {
  std::memset(&algo, 0, sizeof algo);
  algo.data[0] = kAlgoMagic;
  std::memcpy(&algo.data[1], &info, sizeof info);
}

bool unpack(const cublasLtMatmulAlgo_t* algo, AlgoInfo& info) {
  if (!algo || algo->data[0] != kAlgoMagic) return false;
  std::memcpy(&info, &algo->data[1], sizeof info);
  return true;
}

uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p) | 256u;
  return static_cast<uint32_t>(a & (~a + 1));
}

// Bytes from the start of a matrix to the end of its last element, over the batch.
std::size_t extent(const cublasLtMatrixLayoutOpaque_t& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const auto e = static_cast<std::size_t>(element_bytes(l.type));
  const auto last = static_cast<std::size_t>(l.cols - 1) * static_cast<std::size_t>(l.ld) + l.rows +
                    static_cast<std::size_t>(l.batch - 1) * static_cast<std::size_t>(l.stride);
  return last * e;
}

bool objects_live(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                  cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  return is_live(h) && is_live(desc) && is_live(a) && is_live(b) && is_live(c) && is_live(d);
}

cublasStatus_t refuse(const char* call, cublasStatus_t status, const std::string& why) {
  report("%s: %s: %s", call, cublasLtGetStatusName(status), why.c_str());
  return status;
}

bool device_ok(const char* call, const void* p, std::size_t bytes, const char* what) {
  if (!p || !is_device_range(p, bytes)) {
    report("%s: %s (%p, %zu bytes) is not inside one cudaMalloc allocation", call, what, p, bytes);
    return false;
  }
  if (device_of(p) != current_device()) {
    report("%s: %s (%p) is device %d's memory, but device %d is current", call, what, p,
           device_of(p), current_device());
    return false;
  }
  return true;
}

float read_scale(const void* p) {
  return p ? *static_cast<const float*>(p) : 1.0f;
}

}  // namespace
}  // namespace emu::detail

namespace emu {

bool check_device_range(const void* p, std::size_t bytes, const char* what) {
  return detail::device_ok("device range check", p, bytes, what);
}

}  // namespace emu

using namespace emu::detail;

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (!objects_live(handle, desc, a, b, c, d) || !is_live(pref))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  const LtVerdict v = check_problem(*desc, *a, *b, *c, *d);
  if (v.status != CUBLAS_STATUS_SUCCESS) return refuse(call, v.status, v.why);
  // The promised alignments must satisfy the kernels (FP8: 16 bytes everywhere).
  const AlgoInfo info{pref->align_a, pref->align_b, pref->align_c, pref->align_d};
  if (info.align_a < required_alignment(*a, v.shape.fp8) ||
      info.align_b < required_alignment(*b, v.shape.fp8) ||
      info.align_c < required_alignment(*c, v.shape.fp8) ||
      info.align_d < required_alignment(*d, v.shape.fp8))
    return refuse(call, CUBLAS_STATUS_NOT_SUPPORTED,
                  "no kernel for the promised alignments (MIN_ALIGNMENT_*_BYTES)");
  if (desc->epilogue == CUBLASLT_EPILOGUE_BIAS && desc->bias &&
      alignment_of(desc->bias) <
          static_cast<uint32_t>(element_bytes(effective_bias_type(*desc, *d, v.shape.fp8))))
    return refuse(call, CUBLAS_STATUS_NOT_SUPPORTED, "the bias pointer is misaligned");
  std::memset(&results[0], 0, sizeof results[0]);
  pack(results[0].algo, info);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  if (!objects_live(handle, desc, a, b, c, d)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!is_current_device_stream(stream)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!alpha || !beta) return refuse(call, CUBLAS_STATUS_INVALID_VALUE, "null alpha or beta");
  const LtVerdict v = check_problem(*desc, *a, *b, *c, *d);
  if (v.status != CUBLAS_STATUS_SUCCESS) return refuse(call, v.status, v.why);
  AlgoInfo info{};
  if (!unpack(algo, info))
    return refuse(call, CUBLAS_STATUS_INVALID_VALUE, "algo is not from the heuristic");

  const float alpha_v = *static_cast<const float*>(alpha);
  const float beta_v = *static_cast<const float*>(beta);
  // Pointers: device memory holding each whole matrix, aligned as the algorithm was promised.
  if (!device_ok(call, A, extent(*a), "A") || !device_ok(call, B, extent(*b), "B") ||
      !device_ok(call, D, extent(*d), "D") ||
      (beta_v != 0.0f && !device_ok(call, C, extent(*c), "C")))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (alignment_of(A) < info.align_a || alignment_of(B) < info.align_b ||
      alignment_of(C) < info.align_c || alignment_of(D) < info.align_d)
    return refuse(call, CUBLAS_STATUS_INVALID_VALUE,
                  "a matrix pointer is less aligned than the heuristic's preference promised");
  if (workspace_bytes > 0 && !device_ok(call, workspace, workspace_bytes, "workspace"))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  const cudaDataType_t bias_type = effective_bias_type(*desc, *d, v.shape.fp8);
  if (bias && !device_ok(call, desc->bias,
                         static_cast<std::size_t>(v.shape.m) *
                             static_cast<std::size_t>(element_bytes(bias_type)),
                         "the bias"))
    return CUBLAS_STATUS_INVALID_VALUE;
  // A scalar scale is one float; block scales cover their layout, 16-byte aligned.
  const bool blocks = v.shape.block_scaled;
  const auto scale_bytes = [&](int32_t mode, int64_t outer) {
    return blocks ? static_cast<std::size_t>(block_scale_count(mode, outer, v.shape.k)) * 4 : 4;
  };
  if ((desc->a_scale && !device_ok(call, desc->a_scale, scale_bytes(desc->a_scale_mode, v.shape.m),
                                   "the A scale")) ||
      (desc->b_scale &&
       !device_ok(call, desc->b_scale, scale_bytes(desc->b_scale_mode, v.shape.n), "the B scale")))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (blocks && (alignment_of(desc->a_scale) < 16 || alignment_of(desc->b_scale) < 16))
    return refuse(call, CUBLAS_STATUS_INVALID_VALUE, "block scales must be 16-byte aligned");
  const bool captured = is_capturing(stream);
  if (!captured) {
    if (check_legacy_use(call, stream) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (const cudaError_t e = take_launch_failure(); e != cudaSuccess)
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }

  GemmCall g;
  g.m = v.shape.m;
  g.n = v.shape.n;
  g.k = v.shape.k;
  g.batch = a->batch;
  g.ta = desc->transa == CUBLAS_OP_T;
  g.tb = desc->transb == CUBLAS_OP_T;
  g.a = {A, a->type, a->ld, a->stride};
  g.b = {B, b->type, b->ld, b->stride};
  g.c = {C, c->type, c->ld, c->stride};
  g.d = D;
  if (blocks) {
    g.alpha = alpha_v;
    g.a_blocks = {desc->a_scale_mode, static_cast<const float*>(desc->a_scale)};
    g.b_blocks = {desc->b_scale_mode, static_cast<const float*>(desc->b_scale)};
  }
  g.beta = beta_v;
  g.bias = bias ? desc->bias : nullptr;
  g.bias_type = bias_type;
  // The scalars alpha and beta are taken now, as cuBLASLt copies host scalars into the launch;
  // a per-tensor scale is device memory, read when the product runs.
  const auto run = [g, blocks, alpha_v, a_scale = desc->a_scale,
                    b_scale = desc->b_scale](cudaStream_t) {
    GemmCall now = g;
    if (!blocks)
      now.alpha = static_cast<double>(alpha_v) * read_scale(a_scale) * read_scale(b_scale);
    reference_gemm(now);
  };
  if (captured)
    return *capture_node(stream, NodeKind::Gemm, run) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_EXECUTION_FAILED;
  run(stream);
  return CUBLAS_STATUS_SUCCESS;
}
