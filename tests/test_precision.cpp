// The precision policy of docs/reference/numerics.md for CPUs and GPUs of each capability.
#include <gtest/gtest.h>

#include "core/precision.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

TEST(Precision, CpuAutoPicksBf16OnlyWhereNative) {
  CpuFeatures plain, bf16;
  bf16.avx512 = bf16.avx512_bf16 = true;
  EXPECT_EQ(resolve_cpu_precision(Precision::Auto, plain).precision, Precision::Fp32);
  const auto c = resolve_cpu_precision(Precision::Auto, bf16);
  EXPECT_EQ(c.precision, Precision::Bf16);
  EXPECT_NE(c.reason.find("AVX512-BF16"), std::string::npos);
  EXPECT_EQ(resolve_cpu_precision(Precision::Fp8, bf16).label(), "fp8 (emulated)");
  EXPECT_EQ(resolve_cpu_precision(Precision::Bf16, plain).label(), "bf16 (emulated)");
  EXPECT_EQ(resolve_cpu_precision(Precision::Bf16, bf16).label(), "bf16");
}

TEST(Precision, CudaFollowsComputeCapability) {
  EXPECT_EQ(resolve_cuda_precision(Precision::Auto, 9, 0).precision, Precision::Fp8);
  EXPECT_EQ(resolve_cuda_precision(Precision::Auto, 8, 9).precision, Precision::Fp8);
  const auto ampere = resolve_cuda_precision(Precision::Auto, 8, 0);
  EXPECT_EQ(ampere.precision, Precision::Bf16);
  EXPECT_EQ(ampere.reason, "fp8 unavailable: compute capability 8.0 < 8.9; using bf16");
  EXPECT_EQ(resolve_cuda_precision(Precision::Auto, 7, 5).precision, Precision::Fp32);
  EXPECT_THROW(resolve_cuda_precision(Precision::Fp8, 8, 6), Error);  // never a silent downgrade
  EXPECT_THROW(resolve_cuda_precision(Precision::Bf16, 7, 0), Error);
  EXPECT_EQ(resolve_cuda_precision(Precision::Fp32, 7, 0).precision, Precision::Fp32);
}

TEST(Precision, NamesParse) {
  EXPECT_EQ(parse_precision("fp8"), Precision::Fp8);
  EXPECT_EQ(parse_precision("auto"), Precision::Auto);
  EXPECT_THROW(parse_precision("fp16"), Error);
}

}  // namespace
}  // namespace fp8lm
