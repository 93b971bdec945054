#include "kernels/cuda/gemm_plan.h"

#include <fmt/format.h>

#include <array>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/scratch.h"

namespace fp8lm::cuda {

void throw_cublas_error(const char* what, cublasStatus_t status, const char* file, int line) {
  throw Error(fmt::format("cuBLASLt: {} failed: {} ({}:{})", what, cublasLtGetStatusString(status),
                          file, line));
}

namespace {

struct DeviceInfo {
  cublasLtHandle_t handle = nullptr;
  int cc = 0;
};

int current_device() {
  int device = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Handles live as long as the process: destroying them from a static destructor can run after
// the CUDA runtime has shut down.
DeviceInfo& device_info(int device) {
  static std::mutex mutex;
  static auto* infos = new std::unordered_map<int, DeviceInfo>();
  const std::lock_guard<std::mutex> lock(mutex);
  DeviceInfo& info = (*infos)[device];  // node-based: the reference outlives later inserts
  if (!info.handle) {
    int major = 0, minor = 0;
    FP8LM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    FP8LM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    info.cc = 10 * major + minor;
    FP8LM_CUBLAS_CHECK(cublasLtCreate(&info.handle));
  }
  return info;
}

int64_t element_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
      return 2;
    default:
      return 1;  // the FP8 types
  }
}

std::string_view type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return "f32";
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_8F_E4M3:
      return "e4m3";
    case CUDA_R_8F_E5M2:
      return "e5m2";
    default:
      return "?";
  }
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address
// and, for batches, the byte stride between matrices.
uint32_t alignment(const void* p, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u | static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

struct Alignments {
  uint32_t a, b, c;
};

Alignments alignments(const LtProblem& p, const LtOperands& ops) {
  const bool batched = p.batch > 1;
  return {alignment(ops.a, batched ? p.stride_a * element_bytes(p.atype) : 0),
          alignment(ops.b, batched ? p.stride_b * element_bytes(p.btype) : 0),
          alignment(ops.c, batched ? p.stride_c * element_bytes(p.ctype) : 0)};
}

using Key = std::array<int64_t, 24>;

Key make_key(int device, const LtProblem& p, const Alignments& al) {
  // clang-format off
  return {device, p.transa, p.transb, p.m, p.n, p.k, p.atype, p.btype, p.ctype, p.lda, p.ldb,
          p.ldc, p.batch, p.stride_a, p.stride_b, p.stride_c, p.fp8, p.alpha_nonzero,
          p.beta_nonzero, al.a, al.b, al.c, p.scale_mode_a, p.scale_mode_b};
  // clang-format on
}

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : key) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

std::string describe(const LtProblem& p) {
  return fmt::format("m={} n={} k={} (column-major) A {}{} B {}{} C {} batch {}{}", p.m, p.n, p.k,
                     type_name(p.atype), p.transa == CUBLAS_OP_T ? "ᵀ" : "", type_name(p.btype),
                     p.transb == CUBLAS_OP_T ? "ᵀ" : "", type_name(p.ctype), p.batch,
                     p.scale_mode_a || p.scale_mode_b
                         ? fmt::format(" scale modes {}/{}", p.scale_mode_a, p.scale_mode_b)
                         : std::string());
}

// A cuBLASLt setter's status; Error naming the setter and the attribute.
void check_set(cublasStatus_t s, const char* setter, int attr) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_cublas_error(fmt::format("{}({})", setter, attr).c_str(), s, __FILE__, __LINE__);
}

template <typename T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  check_set(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)),
            "cublasLtMatmulDescSetAttribute", attr);
}

template <typename T>
void set_attr(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const T& value) {
  check_set(cublasLtMatrixLayoutSetAttribute(layout, attr, &value, sizeof(value)),
            "cublasLtMatrixLayoutSetAttribute", attr);
}

template <typename T>
void set_attr(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  check_set(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)),
            "cublasLtMatmulPreferenceSetAttribute", attr);
}

}  // namespace

struct LtPlan {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;  // what the stream's workspace holds (and the heuristic allowed)
  bool fp8 = false;

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // statuses ignored: nothing useful to do with a failure here
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

// The per-call scale pointers, set before the heuristic runs too.
void set_pointers(LtPlan& plan, const LtOperands& ops) {
  if (plan.fp8) {
    set_attr(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ops.scale_a);
    set_attr(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, ops.scale_b);
  }
}

void make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                 int64_t stride, cublasLtMatrixLayout_t* out) {
  FP8LM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    set_attr(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_attr(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
}

// nullptr when cuBLASLt has no algorithm for it.
std::unique_ptr<LtPlan> build(const LtProblem& p, const LtOperands& ops, const DeviceInfo& dev,
                              const Alignments& al) {
  auto plan = std::make_unique<LtPlan>();
  plan->handle = dev.handle;
  plan->workspace_bytes = lt_workspace_bytes(dev.cc);
  plan->fp8 = p.fp8;
  // FP32 compute (never TF32 for FP32 operands) and FP32 alpha/beta in every precision.
  FP8LM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.transa));
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.transb));
  set_pointers(*plan, ops);
  if (p.scale_mode_a || p.scale_mode_b) {
#if CUBLAS_VERSION >= 120900
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, p.scale_mode_a);
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, p.scale_mode_b);
#else
    return nullptr;  // headers older than the block modes: no plan, the caller's other way
#endif
  }

  const bool a_n = p.transa == CUBLAS_OP_N, b_n = p.transb == CUBLAS_OP_N;
  make_layout(p.atype, a_n ? p.m : p.k, a_n ? p.k : p.m, p.lda, p.batch, p.stride_a, &plan->a);
  make_layout(p.btype, b_n ? p.k : p.n, b_n ? p.n : p.k, p.ldb, p.batch, p.stride_b, &plan->b);
  make_layout(p.ctype, p.m, p.n, p.ldc, p.batch, p.stride_c, &plan->c);

  cublasLtMatmulPreference_t pref = nullptr;
  FP8LM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                        decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
  set_attr(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<uint64_t>(plan->workspace_bytes));
  set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al.a);
  set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al.b);
  set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al.c);
  set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al.c);

  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      dev.handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &count);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return nullptr;
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_cublas_error(("cublasLtMatmulAlgoGetHeuristic for " + describe(p)).c_str(), s, __FILE__,
                       __LINE__);
  if (count == 0 || result.state != CUBLAS_STATUS_SUCCESS) return nullptr;
  plan->algo = result.algo;
  return plan;
}

}  // namespace

LtPlan* lt_plan_if_any(const LtProblem& p, const LtOperands& ops) {
  // Per thread: a plan's descriptor is written (pointers) on every call.
  thread_local std::unordered_map<Key, std::unique_ptr<LtPlan>, KeyHash> cache;
  const int device = current_device();
  const Alignments al = alignments(p, ops);
  const Key key = make_key(device, p, al);
  if (auto it = cache.find(key); it != cache.end()) return it->second.get();
  return cache.emplace(key, build(p, ops, device_info(device), al)).first->second.get();
}

LtPlan& lt_plan(const LtProblem& p, const LtOperands& ops) {
  if (LtPlan* plan = lt_plan_if_any(p, ops)) return *plan;
  const DeviceInfo& dev = device_info(current_device());
  const Alignments al = alignments(p, ops);
  throw Error(
      fmt::format("cuBLASLt has no algorithm for {} on a device of compute capability "
                  "{}.{} (alignments A {} B {} C {} bytes)",
                  describe(p), dev.cc / 10, dev.cc % 10, al.a, al.b, al.c));
}

void lt_run(LtPlan& plan, const LtOperands& ops, float alpha, float beta, cudaStream_t stream) {
  set_pointers(plan, ops);
  void* workspace = stream_scratch(ScratchUse::GemmWorkspace, plan.workspace_bytes, stream);
  FP8LM_CUBLAS_CHECK(cublasLtMatmul(plan.handle, plan.desc, &alpha, ops.a, plan.a, ops.b, plan.b,
                                    &beta, ops.c, plan.c, ops.c, plan.c, &plan.algo, workspace,
                                    plan.workspace_bytes, stream));
}

int current_device_cc() {
  return device_info(current_device()).cc;
}

size_t lt_workspace_bytes(int cc) {
  return cc >= 90 ? size_t{32} << 20 : size_t{4} << 20;
}

}  // namespace fp8lm::cuda
