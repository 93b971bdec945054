// The emulator's own tests: that kernels see real barriers, shuffles and WMMA, and that the
// misuse it promises to catch is caught. Compiled like the project's .cu files (rewrite_cu.py,
// then g++ against the shim headers).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mma.h>

#include <emu/host_syncs.h>
#include <algorithm>
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

// Each lane reads its neighbour's slot, with or without __syncwarp between the write and the
// read. Without it the race check reports the first read of a slot its owner wrote.
template <bool kSync>
__global__ void neighbour_through_shared(float* out) {
  extern __shared__ float slot[];
  slot[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (kSync) __syncwarp();
  out[threadIdx.x] = slot[threadIdx.x ^ 1];
}

TEST(CudaEmu, MissingSyncwarpIsASharedMemoryRace) {
  float* out = device_copy(std::vector<float>(32));
  neighbour_through_shared<true><<<1, 32, 32 * sizeof(float)>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto v = host_copy(out, 32);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(v[t], static_cast<float>(t ^ 1));
  neighbour_through_shared<false><<<1, 32, 32 * sizeof(float)>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  cudaFree(out);
}

// Warp 0 writes what warp 1 reads (kind 0), both write one word (1), or warp 1 overwrites what
// warp 0 read (2): a race unless a __syncthreads separates them (kBarrier). Atomics on one word
// (3) are never a race. (The word is picked by an argument: GCC's instrumentation, which the
// race check rides on, leaves out accesses to static variables at offsets it knows.)
template <int kKind, bool kBarrier>
__global__ void across_warps(int* out, int at) {
  __shared__ int words[4];
  int& word = words[at];
  const bool first = threadIdx.x == 0, second = threadIdx.x == 32;
  if (first) word = 0;
  __syncthreads();
  if (kKind == 0 && first) word = 7;
  if (kKind == 1 && (first || second)) word = static_cast<int>(threadIdx.x);
  if (kKind == 2 && first) out[0] = word;
  if (kKind == 3) atomicAdd(&word, 1);
  if (kBarrier) __syncthreads();
  if (kKind == 0 && second) out[0] = word;
  if (kKind == 2 && second) word = 5;
}

TEST(CudaEmu, AccessesAcrossWarpsWithoutABarrierAreRaces) {
  int* out = device_copy(std::vector<int>(1, 0));
  across_warps<0, true><<<1, 64>>>(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(out, 1)[0], 7);
  across_warps<0, false><<<1, 64>>>(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // read after another's write
  across_warps<1, true><<<1, 64>>>(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // two writes in one interval
  across_warps<2, false><<<1, 64>>>(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // write after another's read
  across_warps<2, true><<<1, 64>>>(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  across_warps<3, false><<<1, 64>>>(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
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
// Block scale modes of A and B (0: scalar), with scale pointers and fast accumulation as given.
struct ScaleModes {
  int32_t a = 0, b = 0;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  int8_t fast_accum = 0;
};

cublasStatus_t heuristic(cudaDataType_t ta, cudaDataType_t tb, cublasOperation_t opa,
                         cublasOperation_t opb, int64_t lda, int32_t bias_type = -2,
                         ScaleModes modes = {}) {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t a_op = opa, b_op = opb;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &a_op, sizeof a_op);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &b_op, sizeof b_op);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &modes.a, sizeof modes.a);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &modes.b, sizeof modes.b);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &modes.a_scale,
                                 sizeof modes.a_scale);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &modes.b_scale,
                                 sizeof modes.b_scale);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &modes.fast_accum,
                                 sizeof modes.fast_accum);
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

// Hopper's FP8 block scaling as the cuBLAS documentation lays it out: D(i, j) is the sum over
// each 128 values of K of the codes' products times A's scale for (row i, that K block) and
// B's for (column j, that K block). A in VEC128_32F (M x ceil(K/128), M contiguous), B in
// BLK128x128_32F (ceil(N/128) x L4, the K-block index contiguous, L4 padded to 4), K with a
// short last block; then what the modes rule out.
TEST(CudaEmu, CublasLtBlockScaledFp8FollowsTheDocumentedLayouts) {
  const int64_t M = 128, N = 64, K = 272, kb = 3, l4 = 4;
  // E4M3 codes of 1, 2, 0.5, -1 and 1.5.
  const uint8_t codes[] = {0x38, 0x40, 0x30, 0xb8, 0x3c};
  const float values[] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  std::vector<uint8_t> a(static_cast<size_t>(K * M)), b(static_cast<size_t>(K * N));
  std::vector<float> av(a.size()), bv(b.size());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {  // A stored K x M (transa = T): element (k, i) at k + i K
      const int c = static_cast<int>((k * 7 + i * 3) % 5);
      a[static_cast<size_t>(k + i * K)] = codes[c];
      av[static_cast<size_t>(k + i * K)] = values[c];
    }
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) {  // B stored K x N: element (k, j) at k + j K
      const int c = static_cast<int>((k * 5 + j) % 5);
      b[static_cast<size_t>(k + j * K)] = codes[c];
      bv[static_cast<size_t>(k + j * K)] = values[c];
    }
  std::vector<float> sa(static_cast<size_t>(M * kb)), sb(static_cast<size_t>(l4), -99.0f);
  for (size_t i = 0; i < sa.size(); ++i) sa[i] = 0.25f * static_cast<float>(1 + i % 7);
  for (int64_t q = 0; q < kb; ++q) sb[static_cast<size_t>(q)] = 1.5f + static_cast<float>(q);
  uint8_t* da = device_copy(a);
  uint8_t* db = device_copy(b);
  float* dsa = device_copy(sa);
  float* dsb = device_copy(sb);
  float* dd = device_copy(std::vector<float>(static_cast<size_t>(M * N), 0.0f));

  const ScaleModes modes{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                         CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, dsa, dsb};
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t T = CUBLAS_OP_T, Nop = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &Nop, sizeof Nop);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &modes.a, sizeof modes.a);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &modes.b, sizeof modes.b);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dsa, sizeof dsa);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dsb, sizeof dsb);
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, M, K);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, N, K);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, M);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(found, 1);
  const float alpha = 2.0f, beta = 0.0f;
  ASSERT_EQ(cublasLtMatmul(h, desc, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, &result.algo,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> d = host_copy(dd, static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0;
      for (int64_t q = 0; q < kb; ++q) {
        double part = 0;
        for (int64_t k = 128 * q; k < std::min(K, 128 * q + 128); ++k)
          part += static_cast<double>(av[static_cast<size_t>(k + i * K)]) *
                  bv[static_cast<size_t>(k + j * K)];
        want +=
            part * sa[static_cast<size_t>(i + q * M)] * sb[static_cast<size_t>(q + j / 128 * l4)];
      }
      ASSERT_EQ(d[static_cast<size_t>(i + j * M)], static_cast<float>(2.0 * want)) << i << "," << j;
    }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);

  const auto E4M3 = CUDA_R_8F_E4M3;
  const auto Top = CUBLAS_OP_T, Nt = CUBLAS_OP_N;
  const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  EXPECT_EQ(heuristic(E4M3, E4M3, Top, Nt, 64, -2, {vec, vec, dsa, dsb}), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(E4M3, E4M3, Top, Nt, 64, -2, {blk, blk, dsa, dsb}),
            CUBLAS_STATUS_NOT_SUPPORTED);  // 2D x 2D
  EXPECT_EQ(heuristic(E4M3, E4M3, Top, Nt, 64, -2,
                      {CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, vec, dsa, dsb}),
            CUBLAS_STATUS_NOT_SUPPORTED);  // MX is Blackwell's
  EXPECT_EQ(heuristic(E4M3, E4M3, Top, Nt, 64, -2, {vec, 0, dsa, dsb}),
            CUBLAS_STATUS_NOT_SUPPORTED);  // one operand scalar
  EXPECT_EQ(heuristic(E4M3, E4M3, Top, Nt, 64, -2, {vec, blk, dsa, dsb, 1}),
            CUBLAS_STATUS_NOT_SUPPORTED);  // fast accumulation
  EXPECT_EQ(heuristic(CUDA_R_16BF, CUDA_R_16BF, Top, Nt, 64, -2, {vec, blk, dsa, dsb}),
            CUBLAS_STATUS_NOT_SUPPORTED);  // not FP8
  EXPECT_EQ(heuristic(E4M3, E4M3, Top, Nt, 64, -2, {vec, blk, nullptr, dsb}),
            CUBLAS_STATUS_INVALID_VALUE);  // no A scales
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dsa),
                  static_cast<void*>(dsb), static_cast<void*>(dd)})
    cudaFree(p);
}

// Each block (and each thread of block 0) records when its turn came: the launch order.
__global__ void record_turns(unsigned* block_turn, unsigned* thread_turn, unsigned* clock) {
  if (threadIdx.x == 0) block_turn[blockIdx.x] = atomicAdd(clock, 1u);
  if (blockIdx.x == 0) thread_turn[threadIdx.x] = atomicAdd(clock + 1, 1u);
}

// Broken: block b copies what block b - 1 wrote, which holds only if blocks run in index order.
__global__ void chain_through_blocks(int* v) {
  if (threadIdx.x == 0) v[blockIdx.x + 1] = v[blockIdx.x] + 1;
}

TEST(CudaEmu, BlocksAndThreadsRunInShuffledOrders) {
  unsigned* block_turn = device_copy(std::vector<unsigned>(64));
  unsigned* thread_turn = device_copy(std::vector<unsigned>(256));
  unsigned* clock = device_copy(std::vector<unsigned>(2, 0));
  record_turns<<<64, 256>>>(block_turn, thread_turn, clock);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (const auto& turns : {host_copy(block_turn, 64), host_copy(thread_turn, 256)}) {
    std::vector<unsigned> sorted = turns;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);  // each ran once
    EXPECT_FALSE(std::is_sorted(turns.begin(), turns.end()));  // CUDA_EMU_SEED=1: not in order
  }
  std::vector<int> chain(65, -1);
  chain[0] = 0;
  int* v = device_copy(chain);
  chain_through_blocks<<<64, 32>>>(v);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NE(host_copy(v, 65)[64], 64);  // in index order it would count up to 64
  for (void* p : {static_cast<void*>(block_turn), static_cast<void*>(thread_turn),
                  static_cast<void*>(clock), static_cast<void*>(v)})
    cudaFree(p);
}

__global__ void read_at(float* out, const float* in, int i) {
  out[0] = in[i];
}
__global__ void write_at(float* p, int i) {
  p[i] = 1.0f;
}

TEST(CudaEmu, AccessesOutsideAnAllocationFailTheLaunch) {
  float* out = device_copy(std::vector<float>(1, 0.0f));
  float* whole = device_copy(std::vector<float>(1024, 0.0f));  // ends on a guard page
  float* part = device_copy(std::vector<float>(1000, 0.0f));   // 4000 bytes: 96 guard bytes
  read_at<<<1, 1>>>(out, whole, 1023);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  read_at<<<1, 1>>>(out, whole, 1024);  // faults on the guard page
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  read_at<<<1, 1>>>(out, whole, -1);  // the page before a page-aligned allocation
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  write_at<<<1, 1>>>(part, 999);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  write_at<<<1, 1>>>(part, 1000);  // inside the 256-byte granule: the guard bytes show it
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  write_at<<<1, 1>>>(part, -1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaFree(part), cudaSuccess);  // the launch check restored the guard bytes
  cudaFree(whole);
  cudaFree(out);
}

struct Table {
  const float* values;  // a device pointer inside a struct: not checked at launch
};

__global__ void read_through(float* out, Table t) {
  out[0] = t.values[0];
}

TEST(CudaEmu, UseAfterFreeThroughAStructFailsTheLaunch) {
  float* out = device_copy(std::vector<float>(1, 0.0f));
  float* freed = device_copy(std::vector<float>(64, 2.0f));
  read_through<<<1, 1>>>(out, Table{freed});
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(out, 1)[0], 2.0f);
  cudaFree(freed);
  read_through<<<1, 1>>>(out, Table{freed});
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  cudaFree(out);
}

__global__ void load_float4(float* out, const float* in) {
  const float4 v = *reinterpret_cast<const float4*>(in);
  out[0] = v.x + v.y + v.z + v.w;
}

TEST(CudaEmuDeathTest, MisalignedVectorLoadsStopTheProgram) {
  float* out = device_copy(std::vector<float>(1, 0.0f));
  float* in = device_copy(std::vector<float>(8, 1.0f));
  load_float4<<<1, 1>>>(out, in + 4);  // 16-byte aligned
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(out, 1)[0], 4.0f);
  // A GPU faults on a misaligned vector load (misaligned address); the build's alignment
  // sanitizer stops the program with the type and the address.
  EXPECT_DEATH(load_float4<<<1, 1>>>(out, in + 1), "misaligned address");
  cudaFree(in);
  cudaFree(out);
}

TEST(CudaEmu, KernelsUseTheCurrentDevicesMemory) {
  setenv("CUDA_EMU_DEVICES", "2", 1);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(count, 2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  float* on1 = device_copy(std::vector<float>(32, 0.0f));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  touch<<<1, 32>>>(on1);  // device 1's memory in a launch on device 0
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  touch<<<1, 32>>>(on1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The dynamic shared-memory opt-in is per device: device 0's (an earlier test) is not 1's.
  touch<<<1, 32, 64 * 1024>>>(on1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  touch<<<1, 32, 64 * 1024>>>(on1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(on1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  unsetenv("CUDA_EMU_DEVICES");
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}

__global__ void add_to_each(float* x, float v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += v;
}

// A graph made from what `queue` puts on s (a cudaStreamCreate stream: the legacy default
// stream cannot capture).
template <typename F>
cudaError_t capture(cudaStream_t s, cudaStreamCaptureMode mode, F queue, cudaGraph_t* graph) {
  EXPECT_EQ(cudaStreamBeginCapture(s, mode), cudaSuccess);
  queue();
  return cudaStreamEndCapture(s, graph);
}

TEST(CudaEmu, CapturedWorkRunsAtEachLaunchOfItsGraphNotBefore) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* x = device_copy(std::vector<float>(40, 1.0f));
  float* y = device_copy(std::vector<float>(4, 0.0f));
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(float)), cudaSuccess);
  pinned[0] = 5.0f;
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(capture(
                s, cudaStreamCaptureModeGlobal,
                [&] {
                  add_to_each<<<2, 32, 0, s>>>(x, 0.5f, 40);
                  EXPECT_EQ(cudaMemcpyAsync(y, pinned, sizeof(float), cudaMemcpyHostToDevice, s),
                            cudaSuccess);
                  EXPECT_EQ(cudaMemsetAsync(y + 1, 0, sizeof(float), s), cudaSuccess);
                  cudaStreamCaptureStatus status{};
                  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
                  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
                },
                &graph),
            cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(x, 1)[0], 1.0f);  // captured, not run
  EXPECT_EQ(host_copy(y, 2)[1], 0.0f);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  pinned[0] = 7.0f;  // the copy reads the host memory when the graph runs
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(host_copy(x, 40)[39], 2.0f);
  EXPECT_EQ(host_copy(y, 1)[0], 7.0f);

  // A graph whose memory was freed since its capture fails its launch.
  float* gone = device_copy(std::vector<float>(40, 1.0f));
  cudaGraph_t stale = nullptr;
  ASSERT_EQ(capture(
                s, cudaStreamCaptureModeGlobal, [&] { add_to_each<<<2, 32, 0, s>>>(gone, 1, 40); },
                &stale),
            cudaSuccess);
  cudaGraphExec_t stale_exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&stale_exec, stale), cudaSuccess);
  ASSERT_EQ(cudaFree(gone), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(stale_exec, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  (void)cudaGetLastError();
  for (cudaGraphExec_t e : {exec, stale_exec}) EXPECT_EQ(cudaGraphExecDestroy(e), cudaSuccess);
  for (cudaGraph_t g : {graph, stale}) EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  cudaFree(x);
  cudaFree(y);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST(CudaEmu, WhatTheRuntimeForbidsInACaptureInvalidatesIt) {
  cudaStream_t s = nullptr, free_running = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&free_running, cudaStreamNonBlocking), cudaSuccess);
  float* d = device_copy(std::vector<float>(32, 0.0f));
  std::vector<float> pageable(32);
  const auto invalidated = [&](cudaStream_t on, cudaStreamCaptureMode mode, auto&& misuse,
                               cudaError_t expected) {
    cudaGraph_t graph = nullptr;
    const cudaError_t end = capture(
        on, mode,
        [&] {
          add_to_each<<<1, 32, 0, on>>>(d, 1, 32);
          EXPECT_EQ(misuse(), expected);
        },
        &graph);
    (void)cudaGetLastError();
    return end == cudaErrorStreamCaptureInvalidated && graph == nullptr;
  };
  const size_t bytes = 32 * sizeof(float);
  // The legacy stream (a blocking copy) would wait for the captured kernel, which has not run.
  EXPECT_TRUE(invalidated(
      s, cudaStreamCaptureModeRelaxed,
      [&] { return cudaMemcpy(pageable.data(), d, bytes, cudaMemcpyDeviceToHost); },
      cudaErrorStreamCaptureImplicit));
  EXPECT_TRUE(invalidated(
      s, cudaStreamCaptureModeRelaxed, [&] { return cudaStreamSynchronize(s); },
      cudaErrorStreamCaptureUnsupported));
  EXPECT_TRUE(invalidated(
      s, cudaStreamCaptureModeGlobal,
      [&] {
        void* p = nullptr;
        return cudaMalloc(&p, 64);
      },
      cudaErrorStreamCaptureUnsupported));
  EXPECT_TRUE(invalidated(
      s, cudaStreamCaptureModeRelaxed,
      [&] { return cudaMemcpyAsync(d, pageable.data(), bytes, cudaMemcpyHostToDevice, s); },
      cudaErrorStreamCaptureUnsupported));
  EXPECT_TRUE(invalidated(
      s, cudaStreamCaptureModeRelaxed,
      [&] {
        void* p = nullptr;
        return cudaMallocAsync(&p, 64, s);
      },
      cudaErrorStreamCaptureUnsupported));
  // Allowed: cudaMalloc in relaxed mode; the legacy stream beside a non-blocking capture.
  void* p = nullptr;
  EXPECT_FALSE(invalidated(
      s, cudaStreamCaptureModeRelaxed, [&] { return cudaMalloc(&p, 64); }, cudaSuccess));
  EXPECT_FALSE(invalidated(
      free_running, cudaStreamCaptureModeRelaxed,
      [&] { return cudaMemcpy(pageable.data(), d, bytes, cudaMemcpyDeviceToHost); }, cudaSuccess));
  // ... which global mode forbids: a blocking copy may synchronize the device.
  EXPECT_TRUE(invalidated(
      free_running, cudaStreamCaptureModeGlobal,
      [&] { return cudaMemcpy(pageable.data(), d, bytes, cudaMemcpyDeviceToHost); },
      cudaErrorStreamCaptureUnsupported));
  cudaFree(p);

  // An event recorded in a capture marks a point of the graph: it cannot be waited for.
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(capture(
                s, cudaStreamCaptureModeGlobal,
                [&] {
                  EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
                  EXPECT_EQ(cudaEventQuery(e), cudaErrorCapturedEvent);
                },
                &graph),
            cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(e), cudaErrorCapturedEvent);
  EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
  cudaGraphDestroy(graph);
  cudaEventDestroy(e);

  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
  (void)cudaGetLastError();
  cudaFree(d);
  cudaStreamDestroy(s);
  cudaStreamDestroy(free_running);
}

TEST(CudaEmu, AGraphUpdatesToACaptureOfTheSameShapeOnly) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* x = device_copy(std::vector<float>(32, 0.0f));
  float* y = device_copy(std::vector<float>(32, 0.0f));
  const auto graph_of = [&](auto&& queue) {
    cudaGraph_t g = nullptr;
    EXPECT_EQ(capture(s, cudaStreamCaptureModeGlobal, queue, &g), cudaSuccess);
    return g;
  };
  cudaGraph_t first = graph_of([&] { add_to_each<<<1, 32, 0, s>>>(x, 1, 32); });
  cudaGraph_t other_args = graph_of([&] { add_to_each<<<1, 32, 0, s>>>(y, 3, 32); });
  cudaGraph_t longer = graph_of([&] {
    add_to_each<<<1, 32, 0, s>>>(y, 3, 32);
    add_to_each<<<1, 32, 0, s>>>(x, 3, 32);
  });
  cudaGraph_t memset = graph_of([&] { cudaMemsetAsync(y, 0, 4, s); });
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, first), cudaSuccess);
  cudaGraphExecUpdateResultInfo info{};
  EXPECT_EQ(cudaGraphExecUpdate(exec, longer, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorTopologyChanged);
  EXPECT_EQ(cudaGraphExecUpdate(exec, memset, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorNodeTypeChanged);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphExecUpdate(exec, other_args, &info), cudaSuccess);
  EXPECT_EQ(info.result, cudaGraphExecUpdateSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(host_copy(x, 1)[0], 0.0f);  // the update's arguments, not the first capture's
  EXPECT_EQ(host_copy(y, 1)[0], 3.0f);
  cudaGraphExecDestroy(exec);
  for (cudaGraph_t g : {first, other_args, longer, memset}) cudaGraphDestroy(g);
  cudaFree(x);
  cudaFree(y);
  cudaStreamDestroy(s);
}

TEST(CudaEmu, HostSynchronisationsAreCountedAsTheDocumentationSaysTheyWait) {
  float* d = device_copy(std::vector<float>(64, 0.0f));
  std::vector<float> pageable(64, 1.0f);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 64 * sizeof(float)), cudaSuccess);
  const auto waits = [](auto&& call) {
    const unsigned long long before = emu::host_synchronizations();
    call();
    return emu::host_synchronizations() - before;
  };
  const size_t bytes = 64 * sizeof(float);
  EXPECT_EQ(waits([&] { cudaMemcpy(d, pageable.data(), bytes, cudaMemcpyHostToDevice); }), 1u);
  EXPECT_EQ(waits([&] { cudaMemcpyAsync(d, pageable.data(), bytes, cudaMemcpyHostToDevice); }),
            1u);  // staged through the driver's own pinned memory after a wait
  EXPECT_EQ(waits([&] { cudaMemcpyAsync(d, pinned, bytes, cudaMemcpyHostToDevice); }), 0u);
  EXPECT_EQ(waits([&] { cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost); }), 0u);
  EXPECT_EQ(waits([&] { cudaMemcpyAsync(d, d + 32, bytes / 2, cudaMemcpyDeviceToDevice); }), 0u);
  EXPECT_EQ(waits([&] { cudaMemcpy(d, d + 32, bytes / 2, cudaMemcpyDeviceToDevice); }), 0u);
  EXPECT_EQ(waits([&] { cudaMemcpy2D(pageable.data(), 16, d, 16, 16, 4, cudaMemcpyDeviceToHost); }),
            1u);  // one wait, however many rows
  EXPECT_EQ(waits([&] { cudaStreamSynchronize(nullptr); }), 1u);
  EXPECT_EQ(waits([&] { touch<<<1, 32>>>(d); }), 0u);
  void* scratch = nullptr;
  EXPECT_EQ(waits([&] {
              cudaMallocAsync(&scratch, 256, nullptr);
              cudaFreeAsync(scratch, nullptr);
            }),
            0u);
  EXPECT_EQ(waits([&] { cudaFree(d); }), 1u);
  cudaFreeHost(pinned);
}

}  // namespace
