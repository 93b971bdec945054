// The device's block-scaled casts (kernels/cuda/block_cast.h, issue 14) against the CPU's:
// the device's FP8 decode into BF16 equals the CPU's table on the host (the scale rules are the
// CPU's own functions, tested against their oracles in test_block_formats), and on the device
// the codes, block scales and BF16 operand of MXFP8 (1x32, 32x1) and Float8BlockScaling (1x128,
// 128x1, 128x128) equal fp8lm::block_cast's bit for bit, on shapes that are not multiples of
// the blocks, with zeros, an all-equal block, NaN, Inf, subnormals and outliers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "block_inputs.h"
#include "cuda_test_util.h"
#include "fp8/block_cast.h"
#include "kernels/cuda/block_cast.h"
#include "kernels/cuda/block_rules.cuh"

namespace fp8lm {
namespace {

TEST(CudaBlockRules, TheDecodeEqualsTheCpuTableOnTheHost) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    for (const float p : {1.0f, 0x1p-127f, 0x1p-20f, 0x1p40f}) {
      EXPECT_EQ(cuda::fp8_times_pow2_bf16<DType::E4M3>(c, p),
                bf16_from_float(fp8_decode(c, DType::E4M3) * p))
          << code;
      EXPECT_EQ(cuda::fp8_times_pow2_bf16<DType::E5M2>(c, p),
                bf16_from_float(fp8_decode(c, DType::E5M2) * p))
          << code;
    }
    if (!cuda::fp8_is_nan<DType::E4M3>(c)) {
      EXPECT_EQ(cuda::fp8_value<DType::E4M3>(c), fp8_decode(c, DType::E4M3)) << code;
    }
    EXPECT_EQ(cuda::fp8_is_nan<DType::E5M2>(c), std::isnan(fp8_decode(c, DType::E5M2)));
  }
}

// Casts x on the CPU and its copy dx on the device through c, expecting the same codes, block
// scales, operand and tensor scale_inv (and NVFP4's tensor amax); returns the device's
// tensor scale_inv.
float expect_device_cast_matches_cpu(const BlockCast& c, const std::vector<float>& x,
                                     const DeviceBuffer<float>& dx) {
  const size_t n = x.size();
  const bool fp4 = c.scheme == BlockScheme::Nvfp4;  // the FP8 kernels take no amax
  std::vector<uint8_t> codes(n), scales(block_scale_bytes(c));
  std::vector<bf16_t> operand(n);
  std::vector<float> work(n);
  float tsi = 0, amax = 0;
  block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi, fp4 ? &amax : nullptr},
             x.data(), work.data());
  DeviceBuffer<uint8_t> dcodes(n), dscales(scales.size());
  DeviceBuffer<bf16_t> doperand(n);
  DeviceBuffer<float> dtsi(1), damax(1),
      dwork(std::max<size_t>(1, cuda::block_cast_work_floats(c)));
  cuda::block_cast(
      c,
      {dcodes.data(), dscales.data(), doperand.data(), dtsi.data(), fp4 ? damax.data() : nullptr},
      dx.data(), dwork.data(), nullptr);
  if (fp4) {
    EXPECT_EQ(to_host(damax.data(), 1)[0], amax);
  }
  const float device_tsi = to_host(dtsi.data(), 1)[0];
  EXPECT_EQ(device_tsi, tsi);
  EXPECT_EQ(to_host(dscales.data(), scales.size()), scales);
  EXPECT_EQ(to_host(dcodes.data(), n), codes);
  EXPECT_EQ(to_host(doperand.data(), n), operand);
  return device_tsi;
}

TEST(CudaBlockCast, CodesScalesAndOperandMatchTheCpuBitForBit) {
  FP8LM_REQUIRE_CUDA();
  const int64_t rows = 150, cols = 300;
  const std::vector<float> x = tensor_with_specials(rows, cols, 41, 128);
  const DeviceBuffer<float> dx = to_device(x);
  struct Case {
    BlockScheme scheme;
    int64_t br, bc;
    DType f;
  };
  for (const Case& k :
       {Case{BlockScheme::Mxfp8, 1, 32, DType::E4M3}, Case{BlockScheme::Mxfp8, 32, 1, DType::E5M2},
        Case{BlockScheme::Fp8Block, 1, 128, DType::E4M3},
        Case{BlockScheme::Fp8Block, 128, 1, DType::E4M3},
        Case{BlockScheme::Fp8Block, 128, 128, DType::E5M2}}) {
    SCOPED_TRACE(std::to_string(k.br) + "x" + std::to_string(k.bc));
    BlockCast c;
    c.scheme = k.scheme;
    c.grid = {rows, cols, k.br, k.bc};
    c.format = k.f;
    EXPECT_EQ(expect_device_cast_matches_cpu(c, x, dx), 1.0f);
  }
}

// NVFP4: 1x16 and 16x1 blocks with and without the RHT and stochastic rounding, 16x16 weight
// blocks; rows a multiple of 16 (the RHT's groups), columns not of the blocks.
TEST(CudaBlockCast, Nvfp4MatchesTheCpuBitForBit) {
  FP8LM_REQUIRE_CUDA();
  const int64_t rows = 160, cols = 300;
  const std::vector<float> x = tensor_with_specials(rows, cols, 43, 16);
  const DeviceBuffer<float> dx = to_device(x);
  // The transform's inputs keep zeros, subnormals and outliers but no NaN or Inf: a NaN it
  // makes or passes on has the sign of whichever operand the hardware (or compiler) returns,
  // and a GPU returns its canonical NaN, so the codes of such values are no contract.
  std::vector<float> finite = x;
  for (float& v : finite) {
    if (!std::isfinite(v)) v = 1.0f;
  }
  const DeviceBuffer<float> dfinite = to_device(finite);
  struct Case {
    int64_t br, bc;
    bool rht, sr;
  };
  for (const Case& k :
       {Case{1, 16, false, false}, Case{1, 16, false, true}, Case{16, 1, true, true},
        Case{16, 1, true, false}, Case{16, 1, false, false}, Case{16, 16, false, false}}) {
    SCOPED_TRACE(std::to_string(k.br) + "x" + std::to_string(k.bc) + (k.rht ? " rht" : "") +
                 (k.sr ? " sr" : ""));
    BlockCast c;
    c.scheme = BlockScheme::Nvfp4;
    c.grid = {rows, cols, k.br, k.bc};
    c.rht = k.rht;
    c.stochastic_rounding = k.sr;
    c.sr_key = 0x2545f491u;
    if (k.rht) {
      expect_device_cast_matches_cpu(c, finite, dfinite);
    } else {
      expect_device_cast_matches_cpu(c, x, dx);
    }
  }
}

// More blocks along rows than the row kernel's grid holds groups (8192 blocks of 128 threads:
// 32K warps, 64K half-warp groups), so both widths go round the grid-stride loop more than
// once; the last block of each row is ragged (cols not a multiple of 16). (The column kernel's
// loop, a thread per block, would need over a million blocks here.)
TEST(CudaBlockCast, GridStrideLoopsCoverEveryBlock) {
  FP8LM_REQUIRE_CUDA();
  const int64_t rows = 1040, cols = 1272;
  const std::vector<float> x = tensor_with_specials(rows, cols, 47, 16);
  const DeviceBuffer<float> dx = to_device(x);
  for (const auto& [br, bc] : {std::pair<int64_t, int64_t>{1, 16}, {1, 32}}) {
    SCOPED_TRACE(std::to_string(br) + "x" + std::to_string(bc));
    BlockCast c;
    c.scheme = BlockScheme::Mxfp8;
    c.grid = {rows, cols, br, bc};
    expect_device_cast_matches_cpu(c, x, dx);
  }
}

// A tensor's row-wise and column-wise casts in one kernel (cuda::block_cast_pair) give the CPU's
// bits for both, for the FP8 block recipes' activation and gradient roles, on a shape whose
// tiles are ragged both ways; NVFP4 (the column copy goes through the RHT) is left to two casts.
TEST(CudaBlockCast, PairedCastsMatchTheCpu) {
  FP8LM_REQUIRE_CUDA();
  const int64_t rows = 150, cols = 300;
  const std::vector<float> x = tensor_with_specials(rows, cols, 53, 128);
  const DeviceBuffer<float> dx = to_device(x);
  const auto n = static_cast<size_t>(rows * cols);
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    for (const BlockRole role : {BlockRole::Input, BlockRole::GradOutput}) {
      SCOPED_TRACE(std::string(scaling_kind_name(kind)) +
                   (role == BlockRole::Input ? " input" : " grad_output"));
      const BlockCast row = recipe_block_cast(recipe, role, false, rows, cols);
      const BlockCast col = recipe_block_cast(recipe, role, true, rows, cols);
      struct Device {
        DeviceBuffer<uint8_t> codes, scales;
        DeviceBuffer<bf16_t> operand;
        DeviceBuffer<float> tsi{1};
        BlockCastOut out() { return {codes.data(), scales.data(), operand.data(), tsi.data()}; }
      };
      Device d[2];
      const BlockCast* casts[2] = {&row, &col};
      for (int k = 0; k < 2; ++k) {
        d[k].codes.resize(n);
        d[k].scales.resize(block_scale_bytes(*casts[k]));
        d[k].operand.resize(n);
      }
      const bool paired =
          cuda::block_cast_pair(row, d[0].out(), col, d[1].out(), dx.data(), nullptr);
      EXPECT_EQ(paired, kind != ScalingKind::Nvfp4);
      if (!paired) continue;
      for (int k = 0; k < 2; ++k) {
        SCOPED_TRACE(k == 0 ? "row-wise" : "column-wise");
        const BlockCast& c = *casts[k];
        std::vector<uint8_t> codes(n), scales(block_scale_bytes(c));
        std::vector<bf16_t> operand(n);
        float tsi = 0;
        std::vector<float> work(n);
        block_cast(c, {codes.data(), scales.data(), operand.data(), &tsi}, x.data(), work.data());
        EXPECT_EQ(to_host(d[k].codes.data(), n), codes);
        EXPECT_EQ(to_host(d[k].scales.data(), scales.size()), scales);
        EXPECT_EQ(to_host(d[k].operand.data(), n), operand);
        EXPECT_EQ(to_host(d[k].tsi.data(), 1)[0], tsi);
      }
    }
  }
}

// Issue 34: casts that keep only their codes, written transposed where asked (the column-wise
// copies a K-major GEMM reads, BlockCastOut::codes_transposed), alone and paired, give the
// CPU's codes and scales; block_decode_bf16 of either layout gives the operand the CPU's cast
// writes, bit for bit (what a GEMM that declines the codes multiplies).
TEST(CudaBlockCast, CodesKeptTransposedMatchTheCpuAndDecodeToItsOperand) {
  FP8LM_REQUIRE_CUDA();
  const int64_t rows = 160, cols = 300;  // rows % 16 == 0 (the RHT); ragged 128-blocks
  std::vector<float> x = tensor_with_specials(rows, cols, 59, 128);
  for (float& v : x) {
    if (!std::isfinite(v)) v = -3.0f;  // NVFP4's RHT: see Nvfp4MatchesTheCpuBitForBit
  }
  const DeviceBuffer<float> dx = to_device(x);
  const auto n = static_cast<size_t>(rows * cols);
  struct Host {
    std::vector<uint8_t> codes, scales;
    std::vector<bf16_t> operand;
    float tsi = 0;
  };
  // The CPU's cast, its codes in the layout asked for.
  const auto cpu_cast = [&](const BlockCast& c, bool transposed) {
    Host h{std::vector<uint8_t>(n), std::vector<uint8_t>(block_scale_bytes(c)),
           std::vector<bf16_t>(n)};
    std::vector<float> work(n);
    BlockCastOut out{h.codes.data(), h.scales.data(), h.operand.data(), &h.tsi};
    out.codes_transposed = transposed;
    block_cast(c, out, x.data(), work.data());
    return h;
  };
  struct Device {
    DeviceBuffer<uint8_t> codes, scales;
    DeviceBuffer<float> tsi{1}, work;
    BlockCastOut out(bool transposed) {
      BlockCastOut o{codes.data(), scales.data(), nullptr, tsi.data()};
      o.codes_transposed = transposed;
      return o;
    }
  };
  const auto expect_device = [&](const BlockCast& c, Device& d, bool transposed) {
    const Host want = cpu_cast(c, transposed);
    EXPECT_EQ(to_host(d.codes.data(), n), want.codes);
    EXPECT_EQ(to_host(d.scales.data(), want.scales.size()), want.scales);
    EXPECT_EQ(to_host(d.tsi.data(), 1)[0], want.tsi);
    DeviceBuffer<bf16_t> operand(n);
    cuda::block_decode_bf16({c, d.codes.data(), d.scales.data(), transposed}, operand.data(),
                            nullptr);
    EXPECT_EQ(to_host(operand.data(), n), want.operand) << "decoded";
  };
  const auto device = [&](const BlockCast& c) {
    return Device{DeviceBuffer<uint8_t>(n), DeviceBuffer<uint8_t>(block_scale_bytes(c)),
                  DeviceBuffer<float>(1),
                  DeviceBuffer<float>(std::max<size_t>(1, cuda::block_cast_work_floats(c)))};
  };
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    Fp8Recipe recipe;
    recipe.kind = kind;
    for (const BlockRole role : {BlockRole::Weight, BlockRole::GradOutput}) {
      const BlockCast row = recipe_block_cast(recipe, role, false, rows, cols);
      const BlockCast col = recipe_block_cast(recipe, role, true, rows, cols);
      for (const bool transposed : {false, true}) {
        SCOPED_TRACE(std::string(scaling_kind_name(kind)) +
                     (role == BlockRole::Weight ? " weight" : " grad_output") +
                     (transposed ? " transposed" : ""));
        for (const BlockCast* c : {&row, &col}) {
          Device d = device(*c);
          cuda::block_cast(*c, d.out(transposed), dx.data(), d.work.data(), nullptr);
          expect_device(*c, d, transposed);
        }
        if (role != BlockRole::GradOutput || kind == ScalingKind::Nvfp4) continue;
        SCOPED_TRACE("paired");
        Device r = device(row), k = device(col);
        ASSERT_TRUE(
            cuda::block_cast_pair(row, r.out(false), col, k.out(transposed), dx.data(), nullptr));
        expect_device(row, r, false);
        expect_device(col, k, transposed);
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
