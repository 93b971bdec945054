// The block-scaled recipes' formats (issue 14): E2M1 (NVFP4's values) and E8M0 (MXFP8's
// scales), each bit-level codec against the double-precision reference and against
// expectations read off the list of representable values: every code round-trips, every
// rounding boundary goes the right way in both directions, and a sweep over float bit patterns
// (specials and subnormals included) agrees with the reference everywhere.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <vector>

#include "block_inputs.h"
#include "core/e2m1.h"
#include "core/e8m0.h"
#include "core/minifloat.h"

namespace fp8lm {
namespace {

TEST(E2M1, EveryCodeDecodesToTheReferenceAndEncodesBack) {
  for (uint32_t code = 0; code < 16; ++code) {
    const double ref = minifloat_decode_reference(code, kE2M1Spec);
    EXPECT_EQ(static_cast<double>(e2m1_decode(static_cast<uint8_t>(code))), ref) << code;
    EXPECT_EQ(std::signbit(e2m1_decode(static_cast<uint8_t>(code))), code >= 8) << code;
    EXPECT_EQ(e2m1_encode(e2m1_decode(static_cast<uint8_t>(code))), code) << code;
    EXPECT_EQ(minifloat_encode_reference(static_cast<float>(ref), kE2M1Spec, true), code) << code;
  }
  EXPECT_EQ(minifloat_decode_reference(kE2M1Spec.max_finite_code(), kE2M1Spec), 6.0);
}

// Each midpoint between neighbouring magnitudes ties to the even code; one float ulp above or
// below goes to the nearer value; for both signs.
TEST(E2M1, EveryRoundingBoundaryGoesTheRightWayInBothDirections) {
  for (uint8_t lo = 0; lo < 7; ++lo) {
    const float a = kE2M1Values[lo], b = kE2M1Values[lo + 1u], mid = (a + b) / 2;
    const uint8_t even = (lo % 2 == 0) ? lo : static_cast<uint8_t>(lo + 1);
    for (const float sign : {1.0f, -1.0f}) {
      const uint8_t s = sign < 0 ? 8 : 0;
      EXPECT_EQ(e2m1_encode(sign * mid), s | even) << mid;
      EXPECT_EQ(e2m1_encode(sign * std::nextafter(mid, 0.0f)), s | lo) << mid;
      EXPECT_EQ(e2m1_encode(sign * std::nextafter(mid, INFINITY)), s | (lo + 1)) << mid;
    }
  }
}

// Beyond 6 everything saturates to ±6 (no Inf to overflow to): values below 7 round to 6 like
// any other (not counted as saturated, as the reference counts it), 7 and beyond and ±Inf are
// clamped; NaN gives the largest magnitude with its sign; a value that rounds to 0 is flushed.
TEST(E2M1, SaturatesAndFlushesAsTheReferenceCounts) {
  bool saturated = false, flushed = false;
  EXPECT_EQ(e2m1_encode(6.9f, &saturated, &flushed), 0x7);
  EXPECT_FALSE(saturated);
  EXPECT_EQ(e2m1_encode(7.0f, &saturated), 0x7);
  EXPECT_TRUE(saturated);
  EXPECT_EQ(e2m1_encode(-INFINITY, &saturated), 0xf);
  EXPECT_TRUE(saturated);
  EXPECT_EQ(e2m1_encode(NAN), 0x7);
  EXPECT_EQ(e2m1_encode(-NAN), 0xf);
  EXPECT_EQ(e2m1_encode(0.2f, nullptr, &flushed), 0x0);
  EXPECT_TRUE(flushed);
  EXPECT_EQ(e2m1_encode(-0.0f, nullptr, &flushed), 0x8);
  EXPECT_FALSE(flushed);
}

TEST(E2M1, TheBitCodecAgreesWithTheReferenceOverFloats) {
  for (const float x : float_sweep()) {
    bool fast_sat = false, ref_sat = false;
    const uint8_t fast = e2m1_encode(x, &fast_sat);
    const uint32_t ref = minifloat_encode_reference(x, kE2M1Spec, /*saturate=*/true, &ref_sat);
    ASSERT_EQ(fast, ref) << "x = " << x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
    ASSERT_EQ(fast_sat, ref_sat) << x;
  }
}

TEST(E8M0, EveryCodeDecodesToItsPowerOfTwoAndEncodesBack) {
  for (uint32_t c = 0; c < 255; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const double value = std::ldexp(1.0, static_cast<int>(c) - 127);
    EXPECT_EQ(static_cast<double>(e8m0_decode(code)), value) << c;
    EXPECT_EQ(e8m0_encode_round_up(e8m0_decode(code)), code) << c;
    EXPECT_EQ(e8m0_encode_round_up_reference(value), code) << c;
    // The reciprocal the quantizer multiplies by: exact, but 1 for code 0 (TE's exp2f_rcp).
    EXPECT_EQ(static_cast<double>(e8m0_reciprocal(code)), c == 0 ? 1.0 : 1.0 / value) << c;
  }
  EXPECT_TRUE(std::isnan(e8m0_decode(kE8M0Nan)));
}

// The scale rounds up: a power of two stays itself, one ulp above goes to the next code, one ulp
// below stays; at the ends the codes clamp (0xFE for 2^127 and beyond, 0x00 for 2^-127 and
// below, a subnormal just above 2^-127 to 0x01).
TEST(E8M0, RoundsUpAtEveryBoundaryAndClampsAtTheEnds) {
  for (int k = -126; k <= 127; ++k) {
    const float p = std::ldexp(1.0f, k);
    const auto code = static_cast<uint8_t>(k + 127);
    EXPECT_EQ(e8m0_encode_round_up(p), code) << k;
    EXPECT_EQ(e8m0_encode_round_up(std::nextafter(p, 0.0f)), code) << k;
    if (k < 127) {
      EXPECT_EQ(e8m0_encode_round_up(std::nextafter(p, INFINITY)), code + 1) << k;
    }
  }
  EXPECT_EQ(e8m0_encode_round_up(FLT_MAX), 0xfe);
  EXPECT_EQ(e8m0_encode_round_up(INFINITY), 0xfe);
  EXPECT_EQ(e8m0_encode_round_up(0x1p-127f), 0x00);
  EXPECT_EQ(e8m0_encode_round_up(std::nextafter(0x1p-127f, 1.0f)), 0x01);
  EXPECT_EQ(e8m0_encode_round_up(FLT_TRUE_MIN), 0x00);
  EXPECT_EQ(e8m0_encode_round_up(0.0f), 0x00);
  EXPECT_EQ(e8m0_encode_round_up(-0.0f), 0x00);
  EXPECT_EQ(e8m0_encode_round_up(NAN), kE8M0Nan);
  EXPECT_EQ(e8m0_encode_round_up(-1.0f), kE8M0Nan);
}

TEST(E8M0, TheBitEncoderAgreesWithTheReferenceOverFloats) {
  for (const float x : float_sweep())
    ASSERT_EQ(e8m0_encode_round_up(x), e8m0_encode_round_up_reference(static_cast<double>(x)))
        << "x = " << x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
}

}  // namespace
}  // namespace fp8lm
