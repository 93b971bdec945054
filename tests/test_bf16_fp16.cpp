// bf16 and fp16: exact decode of every code, round trip, and round-to-nearest-even at every
// midpoint between adjacent values (and one float ulp either side), overflow, subnormals.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <functional>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/minifloat.h"

namespace fp8lm {
namespace {

struct Half {
  const char* name;
  const MinifloatSpec& spec;
  std::function<uint16_t(float)> encode;
  std::function<float(uint16_t)> decode;
};

std::vector<Half> halves() {
  return {{"bf16", kBF16Spec, bf16_from_float, bf16_to_float},
          {"fp16", kFP16Spec, fp16_from_float, fp16_to_float}};
}

float up(float x) {
  return std::nextafter(x, INFINITY);
}
float down(float x) {
  return std::nextafter(x, -INFINITY);
}

TEST(HalfFormats, EveryCodeDecodesExactlyAndRoundTrips) {
  for (const Half& h : halves()) {
    for (uint32_t c = 0; c < 0x10000; ++c) {
      const auto code = static_cast<uint16_t>(c);
      const double want = minifloat_decode_reference(c, h.spec);
      const float got = h.decode(code);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << h.name << " " << c;
        ASSERT_TRUE(std::isnan(h.decode(h.encode(got)))) << h.name << " " << c;
      } else {
        ASSERT_EQ(static_cast<double>(got), want) << h.name << " " << c;
        ASSERT_EQ(std::signbit(got), (c & 0x8000) != 0) << h.name << " " << c;
        ASSERT_EQ(h.encode(got), code) << h.name << " " << c;
      }
    }
  }
}

TEST(HalfFormats, MidpointsTieToEven) {
  for (const Half& h : halves()) {
    const uint32_t max = h.spec.max_finite_code();
    for (uint32_t sign : {0u, 0x8000u}) {
      const float s = sign ? -1.0f : 1.0f;
      for (uint32_t lo = 0; lo < max; ++lo) {
        const float a = h.decode(static_cast<uint16_t>(lo));
        const float b = h.decode(static_cast<uint16_t>(lo + 1));
        const float mid = a + (b - a) / 2;  // exact: at most 12 significant bits, no overflow
        const uint32_t even = lo % 2 == 0 ? lo : lo + 1;
        ASSERT_EQ(h.encode(s * mid), sign | even) << h.name << " " << lo;
        ASSERT_EQ(h.encode(s * down(mid)), sign | lo) << h.name << " " << lo;
        ASSERT_EQ(h.encode(s * up(mid)), sign | (lo + 1)) << h.name << " " << lo;
      }
    }
  }
}

TEST(HalfFormats, OverflowZerosNan) {
  // fp16: 65504 is max; 65520 is the midpoint to 65536, whose mantissa is even -> Inf.
  EXPECT_EQ(fp16_from_float(down(65520.0f)), 0x7bffu);
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7c00u);
  EXPECT_EQ(fp16_from_float(-65520.0f), 0xfc00u);
  EXPECT_EQ(fp16_from_float(FLT_MAX), 0x7c00u);
  EXPECT_EQ(fp16_from_float(INFINITY), 0x7c00u);
  EXPECT_EQ(fp16_from_float(0x1p-25f), 0x0000u);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(fp16_from_float(up(0x1p-25f)), 0x0001u);
  EXPECT_EQ(fp16_from_float(-FLT_TRUE_MIN), 0x8000u);
  EXPECT_EQ(fp16_from_float(down(0x1p-14f)), 0x0400u);  // rounds up into the normals
  // bf16: the midpoint above max (0x1.fep127 + 2^119) ties to the even Inf.
  EXPECT_EQ(bf16_from_float(FLT_MAX), 0x7f80u);
  EXPECT_EQ(bf16_from_float(down(FLT_MAX)), 0x7f80u);
  EXPECT_EQ(bf16_from_float(0x1.fep127f), 0x7f7fu);
  EXPECT_EQ(bf16_from_float(-INFINITY), 0xff80u);
  EXPECT_EQ(bf16_from_float(FLT_TRUE_MIN), 0x0000u);  // 2^-149 < half of 2^-133
  EXPECT_EQ(bf16_from_float(-0.0f), 0x8000u);
  for (const Half& h : halves()) {
    EXPECT_TRUE(std::isnan(h.decode(h.encode(NAN)))) << h.name;
    EXPECT_TRUE(std::signbit(h.decode(h.encode(-NAN)))) << h.name;
  }
}

TEST(HalfFormats, BitCodecsMatchTheReferenceAcrossFloats) {
  for (const Half& h : halves()) {
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
      const uint32_t got = h.encode(x);
      const uint32_t want = minifloat_encode_reference(x, h.spec, /*saturate=*/false);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(h.decode(static_cast<uint16_t>(got)))) << h.name << " " << bits;
      } else {
        ASSERT_EQ(got, want) << h.name << " bits " << bits;
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
