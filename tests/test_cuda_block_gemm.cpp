// Float8BlockScaling's GEMMs on the device (issue 14): operands carrying their codes and block
// scales (GemmOperand::block) in each of TE's roles (fprop: x 1x128 by W 128x128; dgrad: dy
// 1x128 by Wᵀ; wgrad: xᵀ and dyᵀ from 128x1 casts) give the product of the decoded operands,
// through cuBLASLt's block-scale modes where the device has them (cc 9.0, cuBLAS >= 12.9: the
// emulator's device), and through the BF16 GEMM of the decoded operands where not (2D by 2D,
// other schemes, other devices); sizes not multiples of 16 or of the blocks. Skipped without a
// GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "block_inputs.h"
#include "cuda_test_util.h"
#include "fp8/block_cast.h"
#include "kernels/backend.h"
#include "kernels/cuda/block_gemm.h"
#include "kernels/cuda/op_times.h"

namespace fp8lm {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;

// A [rows, cols] tensor cast on the CPU (the device's casts are the same bits:
// test_cuda_block_cast), on the device: codes, scales, the BF16 operand, its tensor scale.
struct DeviceOperand {
  BlockCodes block;
  std::vector<float> decoded;  // [rows, cols], host
  DeviceBuffer<uint8_t> codes, scales;
  DeviceBuffer<bf16_t> operand;
  DeviceBuffer<float> tensor_scale_inv;
  bool codes_only = false;  // the operand as a cast that kept no BF16 copy hands it over

  GemmOperand gemm_operand() const {
    return {codes_only ? nullptr : operand.data(), DType::BF16, tensor_scale_inv.data(), &block};
  }
};

DeviceOperand cast_to_device(BlockScheme scheme, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                             uint64_t seed) {
  BlockCast c;
  c.scheme = scheme;
  c.grid = {rows, cols, br, bc};
  std::vector<float> x = random_tensor(rows * cols, seed, 1.5f);
  for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(j)] = 0.0f;  // a row of zeros
  const auto n = static_cast<size_t>(rows * cols);
  std::vector<uint8_t> codes(n), scales(block_scale_bytes(c));
  std::vector<bf16_t> operand(n);
  float tsi = 0.0f;
  block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi, nullptr}, x.data(), nullptr);
  DeviceOperand d{{c, nullptr, nullptr}, block_decode(c, codes.data(), scales.data(), tsi),
                  to_device(codes),      to_device(scales),
                  to_device(operand),    to_device(std::vector<float>{tsi})};
  d.block.codes = d.codes.data();
  d.block.scales = d.scales.data();
  return d;
}

// A [rows, cols] tensor's column-wise cast (128x1 blocks) as TE keeps it for wgrad: its
// codes stored transposed ([cols, rows], as a K-major GEMM reads them), marked so; its scales
// and BF16 operand as the cast made them.
DeviceOperand cast_transposed_to_device(int64_t rows, int64_t cols, uint64_t seed) {
  DeviceOperand d = cast_to_device(BlockScheme::Fp8Block, rows, cols, 128, 1, seed);
  d.block.transposed = true;
  const std::vector<uint8_t> own = to_host(d.codes.data(), static_cast<size_t>(rows * cols));
  std::vector<uint8_t> stored(own.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      stored[static_cast<size_t>(c * rows + r)] = own[static_cast<size_t>(r * cols + c)];
  d.codes = to_device(stored);
  d.block.codes = d.codes.data();
  return d;
}

// C = alpha op(A) op(B) + beta C0 on the device, against the product of the decoded operands
// in double. Tolerance: accumulation over K terms, each addition losing at most one unit in the
// last place of the running sum, which is bounded by sum |a_k b_k|: (K + 2) u (sum |a b| +
// |beta C0|) covers any order of summation. u is 2^-24 for FP32 accumulation (one BF16 GEMM of
// the decoded operands; the emulator's block-scaled GEMM). A Hopper FP8 tensor core's
// accumulator keeps 13 bits of fraction and truncates (e8m13, promoted to FP32 at the end of each
// 128-long block of K): there u is 2^-13. On an H200 (CUDA 13.0) entries were off by up to
// 2^-13.2 of sum |a b| at K = 150..300: the bound's form holds and its K factor is slack.
void expect_product(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const DeviceOperand& A,
                    const DeviceOperand& B, bool expect_native) {
  Backend& be = cuda::backend(0);
  const float alpha = 0.75f, beta = 0.5f;
  const std::vector<float> c0 = random_tensor(M * N, 99, 1.0f);
  DeviceBuffer<float> dc = to_device(c0);
  const int64_t before = cuda::block_scaled_gemms_run();
  be.gemm(ta, tb, M, N, K, alpha, A.gemm_operand(), B.gemm_operand(), beta, dc.data());
  EXPECT_EQ(cuda::block_scaled_gemms_run() - before, expect_native ? 1 : 0);
  const std::vector<float> c = to_host(dc.data(), c0.size());
#ifdef FP8LM_CUDA_EMU
  const double u = 0x1p-24;
#else
  const double u = expect_native ? 0x1p-13 : 0x1p-24;
#endif
  // op(X)[i, k] of X stored [i, k], or [k, i] when transposed.
  const auto at = [](const DeviceOperand& x, bool t, int64_t i, int64_t k) {
    const int64_t cols = x.block.cast.grid.cols;
    return static_cast<double>(x.decoded[static_cast<size_t>(t ? k * cols + i : i * cols + k)]);
  };
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = at(A, ta == Trans::T, i, k) * at(B, tb == Trans::N, j, k);
        sum += p;
        abs_sum += std::fabs(p);
      }
      const double c_prev = beta * static_cast<double>(c0[static_cast<size_t>(i * N + j)]);
      const double ref = alpha * sum + c_prev;
      const double tol = (static_cast<double>(K) + 2.0) * u * (alpha * abs_sum + std::fabs(c_prev));
      ASSERT_NEAR(c[static_cast<size_t>(i * N + j)], ref, tol) << i << "," << j;
    }
  }
}

TEST(CudaBlockGemm, EachRoleEqualsTheProductOfTheDecodedOperands) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 80) GTEST_SKIP() << "the BF16 fallback needs compute capability 8.0";
  const bool native = cuda::block_scaled_gemm_available();
  const BlockScheme fb = BlockScheme::Fp8Block;
  // M, N, K = tokens, outputs, inputs: not multiples of 16 (padding) nor of 128 (short blocks).
  const int64_t T = 150, out = 200, in = 300;
  {
    SCOPED_TRACE("fprop: y = x Wᵀ");
    const DeviceOperand x = cast_to_device(fb, T, in, 1, 128, 1);
    const DeviceOperand w = cast_to_device(fb, out, in, 128, 128, 2);
    expect_product(Trans::N, Trans::T, T, out, in, x, w, native);
  }
  {
    SCOPED_TRACE("dgrad: dx = dy W");
    const DeviceOperand dy = cast_to_device(fb, T, out, 1, 128, 3);
    const DeviceOperand w = cast_to_device(fb, out, in, 128, 128, 4);
    expect_product(Trans::N, Trans::N, T, in, out, dy, w, native);
  }
  {
    SCOPED_TRACE("wgrad: dW = dyᵀ x");
    const DeviceOperand dy = cast_to_device(fb, T, out, 128, 1, 5);
    const DeviceOperand x = cast_to_device(fb, T, in, 128, 1, 6);
    expect_product(Trans::T, Trans::N, out, in, T, dy, x, native);
  }
}

// Issue 34 (finding 3): wgrad's operands with their column-wise codes stored transposed, as
// TE keeps them: the same product, and at sizes that are multiples of 16 the native GEMM
// reads them as they are (the TN form), with no transposed or padded copy; where the device
// has no block-scaled GEMM the BF16 operands in their own layout give it.
TEST(CudaBlockGemm, WgradTakesColumnwiseCodesStoredTransposedWithoutCopies) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 80) GTEST_SKIP() << "the BF16 fallback needs compute capability 8.0";
  const bool native = cuda::block_scaled_gemm_available();
  for (const int64_t T : {160, 150}) {
    SCOPED_TRACE(T);
    const int64_t out = 192, in = 320;
    const DeviceOperand dy = cast_transposed_to_device(T, out, 13);
    const DeviceOperand x = cast_transposed_to_device(T, in, 14);
    const int64_t copies = cuda::fp8_operand_copies();
    expect_product(Trans::T, Trans::N, out, in, T, dy, x, native);
    if (native && T % 16 == 0) {
      EXPECT_EQ(cuda::fp8_operand_copies() - copies, 0);
    }
  }
}

// Where cuBLASLt's modes do not apply, the BF16 GEMM of the decoded operands forms the same
// product: 2D by 2D (cuBLASLt refuses it), blocks across K instead of along it, MXFP8.
TEST(CudaBlockGemm, OtherOperandsTakeTheDecodedPath) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 80) GTEST_SKIP() << "the BF16 fallback needs compute capability 8.0";
  const BlockScheme fb = BlockScheme::Fp8Block;
  const int64_t M = 64, N = 96, K = 160;
  {
    SCOPED_TRACE("2D by 2D");
    expect_product(Trans::N, Trans::T, M, N, K, cast_to_device(fb, M, K, 128, 128, 7),
                   cast_to_device(fb, N, K, 128, 128, 8), false);
  }
  {
    SCOPED_TRACE("1x128 blocks across K");
    expect_product(Trans::T, Trans::T, M, N, K, cast_to_device(fb, K, M, 1, 128, 9),
                   cast_to_device(fb, N, K, 1, 128, 10), false);
  }
  {
    SCOPED_TRACE("mxfp8");
    expect_product(Trans::N, Trans::T, M, N, K, cast_to_device(BlockScheme::Mxfp8, M, K, 1, 32, 11),
                   cast_to_device(BlockScheme::Mxfp8, N, K, 1, 32, 12), false);
  }
}

// Issue 34: operands whose casts kept only codes and scales (as Linear's do where the device
// multiplies them, TE's way) give the same products where the block-scaled GEMM declines them:
// the backend decodes them first, codes stored transposed or not. Where it takes them, codes
// alone suffice.
TEST(CudaBlockGemm, OperandsKeptAsCodesOnlyAreDecodedWhereTheGemmDeclines) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 80) GTEST_SKIP() << "the BF16 fallback needs compute capability 8.0";
  const BlockScheme fb = BlockScheme::Fp8Block;
  const auto codes_only = [](DeviceOperand d) {
    d.codes_only = true;
    return d;
  };
  const int64_t M = 64, N = 96, K = 160;
  {
    SCOPED_TRACE("2D by 2D");
    expect_product(Trans::N, Trans::T, M, N, K, codes_only(cast_to_device(fb, M, K, 128, 128, 21)),
                   codes_only(cast_to_device(fb, N, K, 128, 128, 22)), false);
  }
  {
    SCOPED_TRACE("mxfp8, one operand with its BF16 copy");
    expect_product(Trans::N, Trans::T, M, N, K,
                   codes_only(cast_to_device(BlockScheme::Mxfp8, M, K, 1, 32, 23)),
                   cast_to_device(BlockScheme::Mxfp8, N, K, 1, 32, 24), false);
  }
  {
    SCOPED_TRACE("wgrad from codes stored transposed");
    const bool native = cuda::block_scaled_gemm_available();
    const int64_t T = 150, out = 192, in = 320;
    expect_product(Trans::T, Trans::N, out, in, T,
                   codes_only(cast_transposed_to_device(T, out, 25)),
                   codes_only(cast_transposed_to_device(T, in, 26)), native);
  }
}

// The layouts cuBLASLt reads (docs/cublaslt-block-scaling.md): 1D [ceil(K/128), outer] outer
// contiguous, rows past the grid 0; 2D [outer blocks, ceil(K/128) rounded up to 4], padding 0.
TEST(CudaBlockGemm, ScalesAreLaidOutAsCublasLtReadsThem) {
  FP8LM_REQUIRE_CUDA();
  std::vector<float> grid(5 * 3);  // a row-major grid of 5 x 3 scales
  for (size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<float>(i + 1);
  const DeviceBuffer<float> dgrid = to_device(grid);
  // 1D, K along the grid's columns (a row-wise cast of 5 rows): outer 5 padded to 8.
  const cuda::BlockScaleGrid row{dgrid.data(), 5, 3, 3, 1, false};
  ASSERT_EQ(cuda::block_scale_floats(row, 8), 24);
  DeviceBuffer<float> out(24);
  cuda::lay_out_block_scales(out.data(), row, 8, nullptr);
  std::vector<float> got = to_host(out.data(), 24);
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t o = 0; o < 8; ++o)
      EXPECT_EQ(got[static_cast<size_t>(l * 8 + o)],
                o < 5 ? grid[static_cast<size_t>(o * 3 + l)] : 0.0f)
          << l << "," << o;
  // 2D, K down the grid's rows (a weight read transposed): 3 outer blocks, 5 K blocks -> 8.
  const cuda::BlockScaleGrid col{dgrid.data(), 3, 5, 1, 3, true};
  ASSERT_EQ(cuda::block_scale_floats(col, 300), 24);
  cuda::lay_out_block_scales(out.data(), col, 300, nullptr);
  got = to_host(out.data(), 24);
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t l = 0; l < 8; ++l)
      EXPECT_EQ(got[static_cast<size_t>(o * 8 + l)],
                l < 5 ? grid[static_cast<size_t>(l * 3 + o)] : 0.0f)
          << o << "," << l;
}

}  // namespace
}  // namespace fp8lm
