#pragma once
// Column sums over rows without float atomics, so every run gives the same bits: dst_k[c] +=
// sum over r of term_k(r, c), k < N (dgamma and dbeta together, or one bias gradient).
// First pass: rows split into fixed chunks of kChunkRows; one thread sums one column of one
// chunk in row order into a workspace. Second pass: one thread per column adds the chunks in
// order, then adds the total to dst. With a single chunk this is the CPU kernels' order
// exactly (a float sum from 0 in row order, then added to dst).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/scratch.h"

namespace fp8lm::cuda {

inline constexpr int64_t kChunkRows = 64;
inline constexpr int kColumnBlock = 256;

template <int N>
struct ColumnDst {
  float* p[N];
};

// partials [N][chunks][C].
template <int N, typename Term>
__global__ void __launch_bounds__(kColumnBlock)
    column_partials_kernel(float* partials, Term term, int64_t rows, int64_t C, int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kColumnBlock + threadIdx.x;
  const int64_t chunk = blockIdx.x;
  if (c >= C) return;
  const int64_t r0 = chunk * kChunkRows;
  const int64_t r1 = r0 + kChunkRows < rows ? r0 + kChunkRows : rows;
  float acc[N];
  for (int k = 0; k < N; ++k) acc[k] = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    float t[N];
    term(r, c, t);
    for (int k = 0; k < N; ++k) acc[k] = __fadd_rn(acc[k], t[k]);
  }
  for (int k = 0; k < N; ++k) partials[(k * chunks + chunk) * C + c] = acc[k];
}

// dst_k[c] += the sum of partials[k][0..chunks)[c] in chunk order.
template <int N>
__global__ void __launch_bounds__(kColumnBlock)
    column_finish_kernel(ColumnDst<N> dst, const float* partials, int64_t C, int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < N; ++k) {
    float total = 0.0f;
    for (int64_t j = 0; j < chunks; ++j)
      total = __fadd_rn(total, partials[(k * chunks + j) * C + c]);
    dst.p[k][c] = __fadd_rn(dst.p[k][c], total);
  }
}

// term is a device functor: term(r, c, float t[N]) writes the N terms of element (r, c).
template <int N, typename Term>
void column_sums(ColumnDst<N> dst, Term term, int64_t rows, int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  const int64_t chunks = ceil_div(rows, kChunkRows);
  const int64_t col_blocks = ceil_div(C, kColumnBlock);
  if (col_blocks > 65535) throw Error("column sums: " + std::to_string(C) + " columns is too many");
  auto* partials = static_cast<float*>(stream_scratch(
      ScratchUse::ColumnPartials, static_cast<size_t>(N * chunks * C) * sizeof(float), stream));
  column_partials_kernel<N, Term>
      <<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(col_blocks)), kColumnBlock, 0,
         stream>>>(partials, term, rows, C, chunks);
  FP8LM_CUDA_CHECK_LAUNCH();
  column_finish_kernel<N>
      <<<static_cast<unsigned>(col_blocks), kColumnBlock, 0, stream>>>(dst, partials, C, chunks);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
