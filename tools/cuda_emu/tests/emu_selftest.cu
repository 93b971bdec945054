// The emulator's own tests: that kernels see real barriers, shuffles and WMMA, and that the
// misuse it promises to catch is caught. Compiled like the project's .cu files (rewrite_cu.py,
// then g++ against the shim headers).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <vector>

namespace {

template <typename T>
T* device_copy(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// out[t] = the value thread t+1 wrote before the barrier.
__global__ void rotate_through_shared(int* out) {
  __shared__ int slot[256];
  const int t = threadIdx.x;
  slot[t] = t * 10;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = slot[(t + 1) % blockDim.x] + static_cast<int>(blockIdx.x);
}

TEST(CudaEmu, BarrierOrdersSharedMemory) {
  int* out = device_copy(std::vector<int>(3 * 256));
  rotate_through_shared<<<3, 256>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto v = host_copy(out, 3 * 256);
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 256; ++t) ASSERT_EQ(v[b * 256 + t], (t + 1) % 256 * 10 + b);
  cudaFree(out);
}

__global__ void shuffles(int* out) {
  const int lane = threadIdx.x % 32;
  int* o = out + threadIdx.x * 6;
  o[0] = __shfl_xor_sync(0xffffffffu, lane, 5);
  o[1] = __shfl_down_sync(0xffffffffu, lane, 3);
  o[2] = __shfl_up_sync(0xffffffffu, lane, 2, 16);
  o[3] = __shfl_sync(0xffffffffu, lane * 2, 7);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[5] = __any_sync(0xffffffffu, lane == 31) + 2 * __all_sync(0xffffffffu, lane < 31);
}

TEST(CudaEmu, ShufflesExchangeLaneValues) {
  int* out = device_copy(std::vector<int>(64 * 6));
  shuffles<<<1, 64>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto v = host_copy(out, 64 * 6);
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(v[t * 6 + 0], lane ^ 5);
    EXPECT_EQ(v[t * 6 + 1], lane + 3 < 32 ? lane + 3 : lane);
    EXPECT_EQ(v[t * 6 + 2], lane % 16 >= 2 ? lane - 2 : lane);
    EXPECT_EQ(v[t * 6 + 3], 14);
    EXPECT_EQ(static_cast<unsigned>(v[t * 6 + 4]), ballot);
    EXPECT_EQ(v[t * 6 + 5], 1);
  }
  cudaFree(out);
}

// Lane 0 reads its neighbour's slot without __syncwarp: lanes run until they block, so the
// neighbour has not written yet and lane 0 sees the poisoned shared memory.
__global__ void missing_syncwarp(float* out) {
  extern __shared__ float slot[];
  slot[threadIdx.x] = 1.0f;
  out[threadIdx.x] = slot[threadIdx.x ^ 1];
}

TEST(CudaEmu, MissingSyncwarpReadsPoison) {
  float* out = device_copy(std::vector<float>(32));
  missing_syncwarp<<<1, 32, 32 * sizeof(float)>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(std::isnan(host_copy(out, 32)[0]));
  cudaFree(out);
}

// Reads static shared memory nobody wrote in this block; the previous block left 1.0f there.
__global__ void read_before_write(float* out) {
  __shared__ float slot[32];
  out[blockIdx.x * 32 + threadIdx.x] = slot[threadIdx.x];
  __syncthreads();
  slot[threadIdx.x] = 1.0f;
}

TEST(CudaEmu, StaticSharedMemoryIsPoisonedInEveryBlock) {
  float* out = device_copy(std::vector<float>(64, 0.0f));
  read_before_write<<<2, 32>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (float v : host_copy(out, 64)) EXPECT_TRUE(std::isnan(v));
  cudaFree(out);
}

__global__ void deadlock() {
  if (threadIdx.x == 0) {
    __shfl_sync(0xffffffffu, 1, 0);  // waits for lanes that wait at the barrier
  } else {
    __syncthreads();
  }
}

__global__ void shuffle_with_exited_lanes(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmu, DeadlocksAndExitedLanesFailTheLaunch) {
  deadlock<<<1, 64>>>();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  int* out = device_copy(std::vector<int>(32));
  shuffle_with_exited_lanes<<<1, 32>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reported once, then cleared
  cudaFree(out);
}

__global__ void touch(float* p) {
  p[threadIdx.x] = 0.0f;
}

TEST(CudaEmu, LaunchesAreCheckedLikeTheRuntimeDoes) {
  float* d = device_copy(std::vector<float>(1024));
  touch<<<1, 1025>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  touch<<<1, 32, 64 * 1024>>>(d);  // above 48 KiB without the attribute
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  touch<<<1, 32, 64 * 1024>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> host(32);
  touch<<<1, 32>>>(host.data());  // a host pointer as a kernel argument
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  cudaFree(d);
}

TEST(CudaEmu, MemoryStartsPoisonedAndCopiesGoTheirWay) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 16 * sizeof(float)), cudaSuccess);
  std::vector<float> h(16, 1.0f);
  EXPECT_EQ(cudaMemcpy(h.data(), d, sizeof(float) * 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0]));
  EXPECT_EQ(cudaMemcpy(h.data(), d, sizeof(float) * 16, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), sizeof(float) * 16, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), sizeof(float) * 17, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);  // past the allocation
  EXPECT_EQ(cudaMemset(h.data(), 0, 4), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d + 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  (void)cudaGetLastError();
}

namespace wmma = nvcuda::wmma;

// c = a · b for one 16x16x16 tile: a row-major, b column-major (its transpose row-major).
__global__ void wmma_tile(float* c, const __nv_bfloat16* a, const __nv_bfloat16* bt) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, bt, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

TEST(CudaEmu, WmmaComputesTheTileProduct) {
  std::vector<__nv_bfloat16> a(256), bt(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16_rn(static_cast<float>(i % 7 - 3));
    bt[i] = __float2bfloat16_rn(static_cast<float>(i % 5 - 2));
  }
  __nv_bfloat16* da = device_copy(a);
  __nv_bfloat16* db = device_copy(bt);
  float* dc = device_copy(std::vector<float>(256));
  wmma_tile<<<1, 32>>>(dc, da, db);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto c = host_copy(dc, 256);
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float want = 1.0f;
      for (int k = 0; k < 16; ++k) want += float(a[r * 16 + k]) * float(bt[col * 16 + k]);
      ASSERT_EQ(c[r * 16 + col], want) << r << "," << col;
    }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

__global__ void count(unsigned long long* total, float* amax) {
  atomicAdd(total, 1ull);
  atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(static_cast<float>(threadIdx.x)));
}

TEST(CudaEmu, AtomicsAddUpAcrossBlocks) {
  auto* total = device_copy(std::vector<unsigned long long>{0});
  float* amax = device_copy(std::vector<float>{0.0f});
  count<<<7, 96>>>(total, amax);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(total, 1)[0], 7u * 96u);
  EXPECT_EQ(host_copy(amax, 1)[0], 95.0f);
  cudaFree(total);
  cudaFree(amax);
}

TEST(CudaEmu, CubSortPairsIsStableAndOrdersSignedKeys) {
  const std::vector<int32_t> keys = {3, -1, 3, 0, -7, 3};
  const std::vector<int32_t> vals = {0, 1, 2, 3, 4, 5};
  int32_t* k = device_copy(keys);
  int32_t* v = device_copy(vals);
  int32_t* ko = device_copy(std::vector<int32_t>(6));
  int32_t* vo = device_copy(std::vector<int32_t>(6));
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, bytes, k, ko, v, vo, 6), cudaSuccess);
  void* temp = nullptr;
  ASSERT_EQ(cudaMalloc(&temp, bytes), cudaSuccess);
  size_t too_few = bytes - 1;
  EXPECT_EQ(cub::DeviceRadixSort::SortPairs(temp, too_few, k, ko, v, vo, 6), cudaErrorInvalidValue);
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp, bytes, k, ko, v, vo, 6), cudaSuccess);
  EXPECT_EQ(host_copy(ko, 6), (std::vector<int32_t>{-7, -1, 0, 3, 3, 3}));
  EXPECT_EQ(host_copy(vo, 6), (std::vector<int32_t>{4, 1, 3, 0, 2, 5}));
  for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(ko),
                  static_cast<void*>(vo), temp})
    cudaFree(p);
}

// The heuristic's verdict on an m = n = k = 64 problem.
cublasStatus_t heuristic(cudaDataType_t ta, cudaDataType_t tb, cublasOperation_t opa,
                         cublasOperation_t opb, int64_t lda, int32_t bias_type = -2) {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t a_op = opa, b_op = opb;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &a_op, sizeof a_op);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &b_op, sizeof b_op);
  if (bias_type != -2) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                   sizeof bias_type);
  }
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatrixLayoutCreate(&a, ta, 64, 64, lda);
  cublasLtMatrixLayoutCreate(&b, tb, 64, 64, 64);
  cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, 64, 64, 64);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t result{};
  int n = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, 1, &result, &n);
  EXPECT_EQ(n, s == CUBLAS_STATUS_SUCCESS ? 1 : 0);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
  return s;
}

TEST(CudaEmu, CublasLtRefusesWhatItsDocumentationRulesOut) {
  const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  EXPECT_EQ(heuristic(CUDA_R_32F, CUDA_R_32F, N, T, 64), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, T, N, 64), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, T, N, 64), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, N, N, 64), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, T, N, 64), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, T, N, 72), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, T, N, 64, CUDA_R_16BF),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, T, N, 64, CUDA_R_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(CUDA_R_32F, CUDA_R_32F, N, N, 64, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(CUDA_R_32F, CUDA_R_32F, N, N, 32), CUBLAS_STATUS_INVALID_VALUE);  // ld < rows
  EXPECT_EQ(heuristic(CUDA_R_32F, CUDA_R_16BF, N, N, 64), CUBLAS_STATUS_NOT_SUPPORTED);

  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int64_t wide = CUBLAS_OP_T;  // the attribute is an int32_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulDescDestroy(desc);
}

}  // namespace
