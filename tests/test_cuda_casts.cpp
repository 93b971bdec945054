// The device casts (kernels/cuda/quantize.h) against their CPU twins: FP8 codes, amax and the
// saturated/flushed counts of fp8lm::quantize bit for bit; BF16 against bf16_from_float bit
// for bit; the FP8 transpose against a host transpose, and the cast fused with it against both.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "cuda_test_util.h"
#include "fp8/quantize.h"
#include "kernels/cuda/quantize.h"
#include "test_util.h"

namespace fp8lm {
namespace {

const DType kFormats[] = {DType::E4M3, DType::E5M2};
// 1 and a power of two move no rounding boundary; 224 and 3.7 push values past the maximum and
// onto midpoints; 2^-7 flushes small values.
const float kScales[] = {1.0f, 224.0f, 0.0078125f, 3.7f};

// The device side of one cast's scaling state: scale, amax and the two counters.
class DeviceCastState {
 public:
  explicit DeviceCastState(float scale, float amax = 0.0f)
      : scale_(to_device(std::vector<float>{scale})),
        amax_(to_device(std::vector<float>{amax})),
        counts_(to_device(std::vector<unsigned long long>{0, 0})) {}

  Fp8Out out(uint8_t* data, DType f) {
    Fp8Out o;
    o.data = data;
    o.scale = scale_.data();
    o.amax = amax_.data();
    o.format = f;
    o.saturated = counts_.data();
    o.flushed = counts_.data() + 1;
    return o;
  }

  CastStats stats() const {
    const auto counts = to_host(counts_.data(), 2);
    CastStats s;
    s.amax = to_host(amax_.data(), 1)[0];
    s.saturated = static_cast<int64_t>(counts[0]);
    s.flushed = static_cast<int64_t>(counts[1]);
    return s;
  }

 private:
  DeviceBuffer<float> scale_, amax_;
  DeviceBuffer<unsigned long long> counts_;
};

std::vector<uint8_t> cpu_codes(const std::vector<float>& x, float scale, DType f,
                               CastStats* stats = nullptr) {
  std::vector<uint8_t> codes(x.size());
  const CastStats s = quantize(codes.data(), x.data(), static_cast<int64_t>(x.size()), scale, f);
  if (stats) *stats = s;
  return codes;
}

void expect_same_codes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       const std::vector<float>& x, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << what << " at " << i << " x=" << x[i];
}

TEST(CudaQuantize, CodesAmaxAndCountsMatchCpuBitForBit) {
  FP8LM_REQUIRE_CUDA();
  // 20001: the 4-wide path with a tail; 3: tail only. An offset of 1 float takes the unaligned
  // one-by-one path.
  for (int64_t n : {int64_t{3}, int64_t{20001}}) {
    for (int64_t offset : {int64_t{0}, int64_t{1}}) {
      const auto pool = test::random_with_specials(static_cast<size_t>(n + offset), 11);
      const std::vector<float> x(pool.begin() + offset, pool.end());
      for (DType f : kFormats) {
        for (float scale : kScales) {
          SCOPED_TRACE(testing::Message() << dtype_short_name(f) << " scale " << scale << " n " << n
                                          << " offset " << offset);
          CastStats want;
          const auto want_codes = cpu_codes(x, scale, f, &want);
          const auto d_x = to_device(pool);
          DeviceBuffer<uint8_t> d_codes(static_cast<size_t>(n + offset));
          DeviceCastState state(scale);
          cuda::quantize(state.out(d_codes.data() + offset, f), d_x.data() + offset, n, nullptr);
          expect_same_codes(to_host(d_codes.data() + offset, static_cast<size_t>(n)), want_codes, x,
                            "code");
          test::expect_same_stats(state.stats(), want);
          if (n > 1000) {
            EXPECT_GT(want.saturated + want.flushed, 0) << "the input should exercise both";
          }
        }
      }
    }
  }
}

TEST(CudaQuantize, AmaxMaxAccumulatesAndNullCountersAreSkipped) {
  FP8LM_REQUIRE_CUDA();
  const auto x = test::randn(5000, 12);
  const float amax = absmax(x.data(), static_cast<int64_t>(x.size()));
  const auto d_x = to_device(x);
  DeviceBuffer<uint8_t> d_codes(x.size());
  for (float prior : {0.0f, amax / 2, amax * 2, INFINITY}) {
    DeviceCastState state(1.0f, prior);
    Fp8Out out = state.out(d_codes.data(), DType::E4M3);
    out.saturated = nullptr;
    out.flushed = nullptr;
    cuda::quantize(out, d_x.data(), static_cast<int64_t>(x.size()), nullptr);
    const CastStats s = state.stats();
    EXPECT_EQ(s.amax, std::fmax(prior, amax)) << "prior " << prior;
    EXPECT_EQ(s.saturated, 0);
    EXPECT_EQ(s.flushed, 0);
  }
}

TEST(CudaAbsmax, MatchesCpuIgnoringNanAndMaxAccumulates) {
  FP8LM_REQUIRE_CUDA();
  const auto x = test::random_with_specials(30001, 13);  // holds ±Inf and NaN
  const auto finite = test::randn(30001, 14);
  for (const auto* input : {&x, &finite}) {
    const float want = absmax(input->data(), static_cast<int64_t>(input->size()));
    const auto d_x = to_device(*input);
    for (float prior : {0.0f, 1e30f}) {
      auto d_amax = to_device(std::vector<float>{prior});
      cuda::absmax(d_amax.data(), d_x.data(), static_cast<int64_t>(input->size()), nullptr);
      EXPECT_EQ(to_host(d_amax.data(), 1)[0], std::fmax(prior, want));
    }
  }
}

TEST(CudaBf16, Fp32ToBf16EqualsBf16FromFloatBitForBit) {
  FP8LM_REQUIRE_CUDA();
  const auto x = test::bf16_cast_inputs(1 << 16, 15);
  const auto d_x = to_device(x);
  DeviceBuffer<bf16_t> d_y(x.size());
  cuda::fp32_to_bf16(d_y.data(), d_x.data(), static_cast<int64_t>(x.size()), nullptr);
  const auto got = to_host(d_y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(got[i], bf16_from_float(x[i]))
        << std::hex << "input 0x" << std::bit_cast<uint32_t>(x[i]);
}

TEST(CudaBf16, Bf16ToFp32WidensEveryCodeExactly) {
  FP8LM_REQUIRE_CUDA();
  std::vector<bf16_t> codes(0x10000);
  for (uint32_t c = 0; c < 0x10000u; ++c) codes[c] = static_cast<bf16_t>(c);
  const auto d_codes = to_device(codes);
  DeviceBuffer<float> d_y(codes.size());
  cuda::bf16_to_fp32(d_y.data(), d_codes.data(), static_cast<int64_t>(codes.size()), nullptr);
  const auto got = to_host(d_y.data(), codes.size());
  for (uint32_t c = 0; c < 0x10000u; ++c)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[c]), std::bit_cast<uint32_t>(bf16_to_float(codes[c])))
        << "code " << c;
}

struct Shape {
  int64_t rows, cols;
};
// One element; one row; one column; tile edges in both directions; whole tiles; many row
// tiles with a ragged last one; more 32x32 tiles (4126) than the kernels' blocks (4096), so a
// block takes several.
const Shape kShapes[] = {{1, 1}, {1, 45}, {33, 1}, {17, 33}, {64, 128}, {300, 70}, {40, 66000}};

// codes [rows, cols] transposed.
std::vector<uint8_t> transpose(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols) {
  std::vector<uint8_t> t(codes.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = codes[static_cast<size_t>(r * cols + c)];
  return t;
}

TEST(CudaTransposeFp8, TransposesBytes) {
  FP8LM_REQUIRE_CUDA();
  std::mt19937 rng(18);
  for (const Shape& s : kShapes) {
    std::vector<uint8_t> codes(static_cast<size_t>(s.rows * s.cols));
    for (auto& c : codes) c = static_cast<uint8_t>(rng());
    const auto d_codes = to_device(codes);
    DeviceBuffer<uint8_t> d_t(codes.size());
    cuda::transpose_fp8(d_t.data(), d_codes.data(), s.rows, s.cols, nullptr);
    EXPECT_EQ(to_host(d_t.data(), codes.size()), transpose(codes, s.rows, s.cols))
        << s.rows << "x" << s.cols;
  }
}

// TE's cast_transpose: both layouts' codes and the cast's statistics equal the CPU's quantize
// (and its transpose) bit for bit, with or without the row-wise codes; the tile loop covers
// ragged edges and blocks that take several tiles.
TEST(CudaQuantizeTransposed, BothLayoutsAndStatsMatchCpuBitForBit) {
  FP8LM_REQUIRE_CUDA();
  for (const Shape& s : kShapes) {
    const auto x = test::random_with_specials(static_cast<size_t>(s.rows * s.cols), 19);
    const auto d_x = to_device(x);
    for (DType f : kFormats) {
      for (const bool rowwise : {true, false}) {
        SCOPED_TRACE(testing::Message() << dtype_short_name(f) << " " << s.rows << "x" << s.cols
                                        << (rowwise ? " with row-wise codes" : " transposed only"));
        CastStats want;
        const auto want_codes = cpu_codes(x, 224.0f, f, &want);
        DeviceBuffer<uint8_t> d_codes(x.size()), d_t(x.size());
        DeviceCastState state(224.0f);
        cuda::quantize_transposed(state.out(rowwise ? d_codes.data() : nullptr, f), d_t.data(),
                                  d_x.data(), s.rows, s.cols, nullptr);
        if (rowwise) expect_same_codes(to_host(d_codes.data(), x.size()), want_codes, x, "code");
        EXPECT_EQ(to_host(d_t.data(), x.size()), transpose(want_codes, s.rows, s.cols));
        test::expect_same_stats(state.stats(), want);
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
