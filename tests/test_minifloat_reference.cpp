// The reference codec against the OCP OFP8 and IEEE definitions, written out independently:
// literal values from the specs, and each code's value from its bit fields.
#include <gtest/gtest.h>

#include <cmath>

#include "core/minifloat.h"

namespace fp8lm {
namespace {

// The OCP definition of a code's value, spelled out per format rather than generically.
double ocp_value(uint32_t code, bool e4m3) {
  const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = static_cast<int>((code & 0x7f) >> man_bits);
  const int m = static_cast<int>(code & ((1u << man_bits) - 1));
  const double s = (code & 0x80) ? -1.0 : 1.0;
  if (e4m3 && e == 15 && m == 7) return NAN;
  if (!e4m3 && e == 31) return m == 0 ? s * INFINITY : NAN;
  if (e == 0) return s * m / (1 << man_bits) * std::pow(2.0, 1 - bias);
  return s * (1.0 + static_cast<double>(m) / (1 << man_bits)) * std::pow(2.0, e - bias);
}

TEST(MinifloatReference, EveryFp8CodeDecodesToItsOcpValue) {
  for (bool e4m3 : {true, false}) {
    const MinifloatSpec& spec = e4m3 ? kE4M3Spec : kE5M2Spec;
    for (uint32_t c = 0; c < 256; ++c) {
      const double want = ocp_value(c, e4m3), got = minifloat_decode_reference(c, spec);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << spec.name << " code " << c;
      } else {
        EXPECT_EQ(got, want) << spec.name << " code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << spec.name << " code " << c;
      }
    }
  }
}

TEST(MinifloatReference, LiteralValuesFromTheSpecs) {
  // The format table of docs/reference/numerics.md.
  EXPECT_EQ(minifloat_decode_reference(0x7e, kE4M3Spec), 448.0);
  EXPECT_EQ(minifloat_decode_reference(0x08, kE4M3Spec), 0x1p-6);
  EXPECT_EQ(minifloat_decode_reference(0x01, kE4M3Spec), 0x1p-9);
  EXPECT_EQ(minifloat_decode_reference(0x38, kE4M3Spec), 1.0);
  EXPECT_TRUE(std::isnan(minifloat_decode_reference(0x7f, kE4M3Spec)));
  EXPECT_TRUE(std::isnan(minifloat_decode_reference(0xff, kE4M3Spec)));
  EXPECT_EQ(minifloat_decode_reference(0x7b, kE5M2Spec), 57344.0);
  EXPECT_EQ(minifloat_decode_reference(0x04, kE5M2Spec), 0x1p-14);
  EXPECT_EQ(minifloat_decode_reference(0x01, kE5M2Spec), 0x1p-16);
  EXPECT_EQ(minifloat_decode_reference(0x7c, kE5M2Spec), INFINITY);
  EXPECT_EQ(minifloat_decode_reference(0xfc, kE5M2Spec), -INFINITY);
  for (uint32_t nan : {0x7du, 0x7eu, 0x7fu, 0xfdu, 0xfeu, 0xffu})
    EXPECT_TRUE(std::isnan(minifloat_decode_reference(nan, kE5M2Spec)));
  EXPECT_EQ(minifloat_decode_reference(0x7bff, kFP16Spec), 65504.0);
  EXPECT_EQ(minifloat_decode_reference(0x0001, kFP16Spec), 0x1p-24);
  EXPECT_EQ(minifloat_decode_reference(0x7f7f, kBF16Spec), 0x1.fep127);
  EXPECT_EQ(minifloat_decode_reference(0x0001, kBF16Spec), 0x1p-133);
}

TEST(MinifloatReference, SpecConstants) {
  EXPECT_EQ(kE4M3Spec.max_finite_code(), 0x7eu);
  EXPECT_EQ(kE4M3Spec.nan_code(), 0x7fu);
  EXPECT_EQ(kE4M3Spec.overflow_code(), 0x7fu);
  EXPECT_EQ(kE5M2Spec.max_finite_code(), 0x7bu);
  EXPECT_EQ(kE5M2Spec.overflow_code(), 0x7cu);
  EXPECT_EQ(kFP16Spec.max_finite_code(), 0x7bffu);
  EXPECT_EQ(kBF16Spec.overflow_code(), 0x7f80u);
}

}  // namespace
}  // namespace fp8lm
