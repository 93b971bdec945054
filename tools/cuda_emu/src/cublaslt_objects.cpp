// cuBLASLt's object lifetime and attribute calls. Each attribute is set from a buffer of its
// exact documented size; any other size is CUBLAS_STATUS_INVALID_VALUE, as in the library.
#include "cublaslt_objects.h"

#include <cstring>
#include <mutex>
#include <set>

#include "report.h"

namespace emu::detail {
namespace {

std::mutex g_mutex;
std::set<const void*> g_live;

template <typename T>
cublasStatus_t create(T** out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  *out = new T{};
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_live.insert(*out);
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t destroy(T* p) {
  if (!p) return CUBLAS_STATUS_SUCCESS;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_live.erase(p)) {
      report("cuBLASLt: destroying %p, which is not a live object", static_cast<const void*>(p));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

// field = *buf, when size is exactly the field's size.
template <typename T>
cublasStatus_t assign(T& field, const void* buf, std::size_t size, const char* call, int attr) {
  if (!buf || size != sizeof(T)) {
    report("%s(attribute %d): buffer of %zu bytes, the attribute takes %zu", call, attr, size,
           sizeof(T));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

bool is_live(const void* h) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return h && g_live.count(h) != 0;
}

int element_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F:
      return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
    default:
      return 0;
  }
}

}  // namespace emu::detail

using emu::detail::assign;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  return emu::detail::create(handle);
}

size_t cublasLtGetVersion(void) {
  return CUBLAS_VERSION;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return emu::detail::destroy(handle);
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    default:
      return cublasLtGetStatusName(status);
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  const cublasStatus_t s = emu::detail::create(desc);
  if (s == CUBLAS_STATUS_SUCCESS) {
    (*desc)->compute = compute;
    (*desc)->scale_type = scale_type;
  }
  return s;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return emu::detail::destroy(desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              std::size_t size) {
  if (!emu::detail::is_live(desc)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const char* call = "cublasLtMatmulDescSetAttribute";
  const int a = static_cast<int>(attr);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return assign(desc->compute, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return assign(desc->scale_type, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return assign(desc->pointer_mode, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return assign(desc->transa, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return assign(desc->transb, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return assign(desc->transc, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return assign(desc->epilogue, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return assign(desc->bias, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return assign(desc->bias_type, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return assign(desc->a_scale, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return assign(desc->b_scale, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
      return assign(desc->c_scale, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
      return assign(desc->d_scale, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
      return assign(desc->amax_d, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
      return assign(desc->fast_accum, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
      return assign(desc->a_scale_mode, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
      return assign(desc->b_scale_mode, buf, size, call, a);
  }
  emu::detail::report("%s: attribute %d is not emulated", call, a);
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  const cublasStatus_t s = emu::detail::create(layout);
  if (s == CUBLAS_STATUS_SUCCESS) {
    (*layout)->type = type;
    (*layout)->rows = rows;
    (*layout)->cols = cols;
    (*layout)->ld = ld;
  }
  return s;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return emu::detail::destroy(layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, std::size_t size) {
  if (!emu::detail::is_live(layout)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  const int a = static_cast<int>(attr);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return assign(layout->type, buf, size, call, a);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return assign(layout->order, buf, size, call, a);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return assign(layout->rows, buf, size, call, a);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return assign(layout->cols, buf, size, call, a);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return assign(layout->ld, buf, size, call, a);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return assign(layout->batch, buf, size, call, a);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return assign(layout->stride, buf, size, call, a);
  }
  emu::detail::report("%s: attribute %d is not emulated", call, a);
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return emu::detail::create(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return emu::detail::destroy(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t size) {
  if (!emu::detail::is_live(pref)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const char* call = "cublasLtMatmulPreferenceSetAttribute";
  const int a = static_cast<int>(attr);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return assign(pref->search_mode, buf, size, call, a);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return assign(pref->max_workspace, buf, size, call, a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return assign(pref->align_a, buf, size, call, a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return assign(pref->align_b, buf, size, call, a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return assign(pref->align_c, buf, size, call, a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return assign(pref->align_d, buf, size, call, a);
  }
  emu::detail::report("%s: attribute %d is not emulated", call, a);
  return CUBLAS_STATUS_INVALID_VALUE;
}
