// transpose_fp8 (quantize.h): each block owns a 32x32 tile of codes. Threads read the tile row
// by row (consecutive threads, consecutive columns) into shared memory, then write it row by
// row of the transpose (consecutive threads, consecutive rows of the input), so both global
// accesses are coalesced.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/quantize.h"

namespace fp8lm::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kBlockRows = 8;  // block (kTile, kBlockRows): each thread takes 4 rows of a tile
// Rows of 36 bytes = 9 words: a warp reading a column of the tile (tile[tx][i], tx = 0..31)
// hits words 9 * tx + i / 4, all in different banks since 9 and 32 are coprime.
constexpr int kTileStride = kTile + 4;
// gridDim.y is limited to 65535 tiles of columns.
constexpr int64_t kMaxCols = int64_t{65535} * kTile;

__global__ void transpose_bytes_kernel(uint8_t* transposed, const uint8_t* codes, int64_t rows,
                                       int64_t cols) {
  __shared__ uint8_t tile[kTile][kTileStride];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int i = ty; i < kTile; i += kBlockRows) {
    const int64_t r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) tile[i][tx] = codes[r * cols + c];
  }
  __syncthreads();
  // Row c0 + i of the transpose holds column c0 + i of the tile.
  const int64_t r = r0 + tx;
  for (int i = ty; i < kTile; i += kBlockRows) {
    const int64_t tc = c0 + i;
    if (tc < cols && r < rows) transposed[tc * rows + r] = tile[tx][i];
  }
}

}  // namespace

void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  if (rows < 0 || cols < 0 || cols > kMaxCols)
    throw Error("cuda::transpose_fp8: unsupported shape [" + std::to_string(rows) + ", " +
                std::to_string(cols) + "] (at most " + std::to_string(kMaxCols) + " columns)");
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTile)),
                  static_cast<unsigned>(ceil_div(cols, kTile)));
  transpose_bytes_kernel<<<grid, dim3(kTile, kBlockRows), 0, stream>>>(transposed, codes, rows,
                                                                       cols);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
