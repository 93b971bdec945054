// transpose_fp8 and quantize_transposed (quantize.h): a block takes 32x32 tiles of codes in
// turn (a grid-stride loop over tiles, so any shape fits the grid and the cast's statistics
// take one atomic per block). Threads read a tile row by row (consecutive threads, consecutive
// columns) into shared memory, then write it row by row of the transpose (consecutive threads,
// consecutive rows of the input), so both global accesses are coalesced. quantize_transposed
// casts the floats as it reads them (TE's cast_transpose): x is read once for both layouts.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/quantize.h"

namespace fp8lm::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kBlockRows = 8;  // block (kTile, kBlockRows): each thread takes 4 rows of a tile
// Rows of 36 bytes = 9 words: a warp reading a column of the tile (tile[tx][i], tx = 0..31)
// hits words 9 * tx + i / 4, all in different banks since 9 and 32 are coprime.
constexpr int kTileStride = kTile + 4;
constexpr int64_t kMaxBlocks = 4096;

using Tile = uint8_t[kTile][kTileStride];

// Tile t's first row and column, tiles numbered row-major over ceil(cols / kTile) per row.
struct TileAt {
  int64_t r0, c0;
  __device__ TileAt(int64_t t, int64_t cols) {
    const int64_t per_row = (cols + kTile - 1) / kTile;
    r0 = t / per_row * kTile;
    c0 = t % per_row * kTile;
  }
};

// Runs the grid's share of the tiles of a [rows, cols] tensor: load(i, r, c) returns the code
// of element (r, c) for the tile's row i, which then goes out transposed. Every thread of the
// block calls it.
template <class Load>
__device__ void transpose_tiles(uint8_t* transposed, int64_t rows, int64_t cols, Load load) {
  __shared__ Tile tile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles = (rows + kTile - 1) / kTile * ((cols + kTile - 1) / kTile);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const TileAt at(t, cols);
    for (int i = ty; i < kTile; i += kBlockRows) {
      const int64_t r = at.r0 + i, c = at.c0 + tx;
      if (r < rows && c < cols) tile[i][tx] = load(r, c);
    }
    __syncthreads();
    // Row c0 + i of the transpose holds column c0 + i of the tile.
    const int64_t r = at.r0 + tx;
    for (int i = ty; i < kTile; i += kBlockRows) {
      const int64_t tc = at.c0 + i;
      if (tc < cols && r < rows) transposed[tc * rows + r] = tile[tx][i];
    }
    __syncthreads();  // the next tile overwrites this one
  }
}

__global__ void transpose_bytes_kernel(uint8_t* transposed, const uint8_t* codes, int64_t rows,
                                       int64_t cols) {
  transpose_tiles(transposed, rows, cols,
                  [&](int64_t r, int64_t c) { return codes[r * cols + c]; });
}

template <DType F>
__global__ void quantize_transposed_kernel(uint8_t* codes, uint8_t* transposed, const float* x,
                                           int64_t rows, int64_t cols, const float* scale,
                                           float* amax, unsigned long long* saturated,
                                           unsigned long long* flushed) {
  const float s = scale ? *scale : 1.0f;
  Fp8Stats stats;
  transpose_tiles(transposed, rows, cols, [&](int64_t r, int64_t c) {
    const uint8_t q = fp8_encode_counted<F>(x[r * cols + c], s, stats);
    if (codes) codes[r * cols + c] = q;
    return q;
  });
  commit_fp8_stats(stats, amax, saturated, flushed);
}

unsigned tile_blocks(int64_t rows, int64_t cols) {
  return grid_stride_blocks(ceil_div(rows, kTile) * ceil_div(cols, kTile), 1, kMaxBlocks);
}

}  // namespace

void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  transpose_bytes_kernel<<<tile_blocks(rows, cols), dim3(kTile, kBlockRows), 0, stream>>>(
      transposed, codes, rows, cols);
  FP8LM_CUDA_CHECK_LAUNCH();
}

void quantize_transposed(Fp8Out out, uint8_t* transposed, const float* x, int64_t rows,
                         int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const auto kernel = out.format == DType::E4M3 ? quantize_transposed_kernel<DType::E4M3>
                                                : quantize_transposed_kernel<DType::E5M2>;
  kernel<<<tile_blocks(rows, cols), dim3(kTile, kBlockRows), 0, stream>>>(
      out.data, transposed, x, rows, cols, out.scale, out.amax, out.saturated, out.flushed);
  FP8LM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8lm::cuda
