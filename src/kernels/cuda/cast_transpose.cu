// Cast+transpose (quantize.h): each block owns a 32x32 tile of x. Threads read the tile row by
// row (consecutive threads, consecutive columns), cast each value once, write the row-major
// codes directly and park them in shared memory, then write the transposed codes row by row of
// the transpose (consecutive threads, consecutive rows of x). The bias gradient is summed per
// tile in a fixed order into partials [row tiles, cols], then down the row tiles by the second
// pass of column_sum.cuh, so its bits never depend on scheduling.
#include <string>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/cuda/scratch.h"

namespace fp8lm::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kBlockRows = 8;  // block (kTile, kBlockRows): each thread takes 4 rows of a tile
// Rows of 36 bytes = 9 words: a warp reading a column of the tile (tile[tx][i], tx = 0..31)
// hits words 9 * tx + i / 4, all in different banks since 9 and 32 are coprime.
constexpr int kTileStride = kTile + 4;
// gridDim.y is limited to 65535 tiles of columns.
constexpr int64_t kMaxCols = int64_t{65535} * kTile;

using Tile = uint8_t[kTile][kTileStride];

// Writes the block's tile of codes, tile[i][j] = element (r0 + i, c0 + j) of [rows, cols], to
// its place in the transposed [cols, rows]: row c0 + i of the transpose holds column c0 + i.
__device__ void store_transposed(uint8_t* transposed, const Tile& tile, int64_t r0, int64_t c0,
                                 int64_t rows, int64_t cols) {
  const int64_t r = r0 + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kBlockRows) {
    const int64_t tc = c0 + i;
    if (tc < cols && r < rows) transposed[tc * rows + r] = tile[threadIdx.x][i];
  }
}

template <Fp8Format F, bool kDbias>
__global__ void cast_transpose_kernel(uint8_t* codes, uint8_t* transposed, float* partials,
                                      const float* x, int64_t rows, int64_t cols,
                                      const float* scale, float* amax,
                                      unsigned long long* saturated, unsigned long long* flushed) {
  __shared__ Tile tile;
  __shared__ float block_column_sums[kBlockRows][kTile];
  const float s = scale ? *scale : 1.0f;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTile;

  Fp8Stats stats;
  float sum = 0.0f;
  const int64_t c = c0 + tx;
  for (int i = ty; i < kTile; i += kBlockRows) {
    const int64_t r = r0 + i;
    if (r < rows && c < cols) {
      const float v = x[r * cols + c];
      const uint8_t q = fp8_encode_counted<F>(v, s, stats);
      if (codes) codes[r * cols + c] = q;
      tile[i][tx] = q;
      if constexpr (kDbias) sum = __fadd_rn(sum, v);
    }
  }
  __syncthreads();
  if (transposed) store_transposed(transposed, tile, r0, c0, rows, cols);

  if constexpr (kDbias) {
    block_column_sums[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && c < cols) {
      float total = block_column_sums[0][tx];
      for (int j = 1; j < kBlockRows; ++j) total = __fadd_rn(total, block_column_sums[j][tx]);
      partials[static_cast<int64_t>(blockIdx.x) * cols + c] = total;
    }
  }
  commit_fp8_stats(stats, amax, saturated, flushed);
}

__global__ void transpose_bytes_kernel(uint8_t* transposed, const uint8_t* codes, int64_t rows,
                                       int64_t cols) {
  __shared__ Tile tile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c = c0 + tx;
  for (int i = ty; i < kTile; i += kBlockRows) {
    const int64_t r = r0 + i;
    if (r < rows && c < cols) tile[i][tx] = codes[r * cols + c];
  }
  __syncthreads();
  store_transposed(transposed, tile, r0, c0, rows, cols);
}

int64_t tiles(int64_t n) {
  return ceil_div(n, kTile);
}

void check_shape(const char* what, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || cols > kMaxCols)
    throw Error(std::string("cuda::") + what + ": unsupported shape [" + std::to_string(rows) +
                ", " + std::to_string(cols) + "] (at most " + std::to_string(kMaxCols) +
                " columns)");
}

template <bool kDbias>
void launch_cast_transpose(const Fp8Out& out, uint8_t* transposed, float* partials, const float* x,
                           int64_t rows, int64_t cols, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(tiles(rows)), static_cast<unsigned>(tiles(cols)));
  const dim3 block(kTile, kBlockRows);
  if (out.format == Fp8Format::E4M3) {
    cast_transpose_kernel<Fp8Format::E4M3, kDbias>
        <<<grid, block, 0, stream>>>(out.data, transposed, partials, x, rows, cols, out.scale,
                                     out.amax, out.saturated, out.flushed);
  } else {
    cast_transpose_kernel<Fp8Format::E5M2, kDbias>
        <<<grid, block, 0, stream>>>(out.data, transposed, partials, x, rows, cols, out.scale,
                                     out.amax, out.saturated, out.flushed);
  }
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cast_transpose(Fp8Out out, uint8_t* transposed, const float* x, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  check_shape("cast_transpose", rows, cols);
  if (rows == 0 || cols == 0) return;
  launch_cast_transpose<false>(out, transposed, nullptr, x, rows, cols, stream);
}

void cast_transpose_dbias(Fp8Out out, uint8_t* transposed, float* dbias, const float* x,
                          int64_t rows, int64_t cols, cudaStream_t stream) {
  check_shape("cast_transpose_dbias", rows, cols);
  if (cols == 0) return;
  if (rows == 0) {  // an empty sum
    FP8LM_CUDA_CHECK(cudaMemsetAsync(dbias, 0, static_cast<size_t>(cols) * sizeof(float), stream));
    return;
  }
  const int64_t row_tiles = tiles(rows);
  auto* partials = static_cast<float*>(
      stream_scratch(ScratchUse::CastDbiasPartials,
                     static_cast<size_t>(row_tiles * cols) * sizeof(float), stream));
  launch_cast_transpose<true>(out, transposed, partials, x, rows, cols, stream);
  column_finish<1>(ColumnDst<1>{{dbias}}, partials, cols, row_tiles, /*accumulate=*/false, stream);
}

void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  check_shape("transpose_fp8", rows, cols);
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>(tiles(rows)), static_cast<unsigned>(tiles(cols)));
  transpose_bytes_kernel<<<grid, dim3(kTile, kBlockRows), 0, stream>>>(transposed, codes, rows,
                                                                       cols);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
