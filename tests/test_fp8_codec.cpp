// FP8 encode, both the double-precision reference and the bit codec the kernels vectorize,
// against expectations derived from the list of representable values: every code round-trips,
// every midpoint ties to the even code, one float ulp either side goes to the nearer code.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <functional>
#include <string>

#include "core/fp8_dtype.h"

namespace fp8lm {
namespace {

using Encoder = std::function<uint32_t(float, bool saturate)>;

struct Case {
  std::string name;
  DType format;
  Encoder encode;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType f : {DType::E4M3, DType::E5M2}) {
    const std::string n(dtype_short_name(f));
    v.push_back({n + "/reference", f, [f](float x, bool sat) {
                   return minifloat_encode_reference(x, fp8_spec(f), sat);
                 }});
    v.push_back(
        {n + "/bitcodec", f, [f](float x, bool sat) { return uint32_t{fp8_encode(x, f, sat)}; }});
  }
  return v;
}

bool is_nan_code(uint32_t code, DType f) {
  return std::isnan(fp8_decode(static_cast<uint8_t>(code), f));
}

float up(float x) {
  return std::nextafter(x, INFINITY);
}
float down(float x) {
  return std::nextafter(x, -INFINITY);
}

TEST(Fp8Encode, EveryCodeRoundTrips) {
  for (const Case& c : cases()) {
    for (uint32_t code = 0; code < 256; ++code) {
      const float v = fp8_decode(static_cast<uint8_t>(code), c.format);
      for (bool sat : {true, false}) {
        const uint32_t back = c.encode(v, sat);
        if (std::isnan(v)) {
          EXPECT_TRUE(is_nan_code(back, c.format)) << c.name << " code " << code;
        } else if (std::isinf(v) && sat) {
          EXPECT_EQ(back, (code & 0x80) | fp8_consts(c.format).max_code)
              << c.name << " code " << code;
        } else {
          EXPECT_EQ(back, code) << c.name << " code " << code << " sat " << sat;
        }
      }
    }
  }
}

TEST(Fp8Encode, MidpointsTieToEvenAndNeighboursRoundToNearest) {
  for (const Case& c : cases()) {
    const uint32_t max_code = fp8_consts(c.format).max_code;
    for (uint32_t sign : {0u, 0x80u}) {
      for (uint32_t lo = 0; lo < max_code; ++lo) {
        const uint32_t hi = lo + 1;  // codes of one sign grow with magnitude
        const float a = std::fabs(fp8_decode(static_cast<uint8_t>(lo), c.format));
        const float b = std::fabs(fp8_decode(static_cast<uint8_t>(hi), c.format));
        const float mid = (a + b) / 2;  // exact: both have at most 4 significant bits
        ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + b) / 2);
        const uint32_t even = (lo % 2 == 0) ? lo : hi;
        const float s = sign ? -1.0f : 1.0f;
        for (bool sat : {true, false}) {
          const std::string where = c.name + " between codes " + std::to_string(lo) + "," +
                                    std::to_string(hi) + (sign ? " negative" : "");
          EXPECT_EQ(c.encode(s * mid, sat), sign | even) << where;
          EXPECT_EQ(c.encode(s * down(mid), sat), sign | lo) << where;
          EXPECT_EQ(c.encode(s * up(mid), sat), sign | hi) << where;
        }
      }
    }
  }
}

TEST(Fp8Encode, BeyondMaxSaturatesOrOverflows) {
  for (const Case& c : cases()) {
    const bool e4m3 = c.format == DType::E4M3;
    const uint32_t max = fp8_consts(c.format).max_code;
    const float max_value = fp8_max(c.format);
    // The midpoint between max and the next value the exponent range would allow:
    // E4M3 448|480 (480's mantissa is odd, so the tie goes down to 448),
    // E5M2 57344|65536 (65536's mantissa is even, so the tie goes up: overflow).
    const float mid = e4m3 ? 464.0f : 61440.0f;
    const uint32_t overflow = e4m3 ? 0x7f : 0x7c;
    for (uint32_t sign : {0u, 0x80u}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(c.encode(s * up(max_value), true), sign | max) << c.name;
      EXPECT_EQ(c.encode(s * up(max_value), false), sign | max) << c.name;
      EXPECT_EQ(c.encode(s * down(mid), false), sign | max) << c.name;
      EXPECT_EQ(c.encode(s * mid, false), sign | (e4m3 ? max : overflow)) << c.name;
      EXPECT_EQ(c.encode(s * up(mid), false), sign | overflow) << c.name;
      for (float big : {mid, up(mid), 1e6f, FLT_MAX, INFINITY}) {
        EXPECT_EQ(c.encode(s * big, true), sign | max) << c.name << " " << big;
      }
      EXPECT_EQ(c.encode(s * INFINITY, false), sign | overflow) << c.name;
      EXPECT_EQ(c.encode(s * FLT_MAX, false), sign | overflow) << c.name;
    }
  }
}

TEST(Fp8Encode, ZerosNansAndTinyValues) {
  for (const Case& c : cases()) {
    for (bool sat : {true, false}) {
      EXPECT_EQ(c.encode(0.0f, sat), 0x00u) << c.name;
      EXPECT_EQ(c.encode(-0.0f, sat), 0x80u) << c.name;
      EXPECT_TRUE(is_nan_code(c.encode(NAN, sat), c.format)) << c.name;
      EXPECT_TRUE(is_nan_code(c.encode(-NAN, sat), c.format)) << c.name;
      // Float subnormals and the smallest normals are far below half the smallest FP8
      // subnormal: they flush to a signed zero.
      for (float tiny : {FLT_TRUE_MIN, 1e-40f, FLT_MIN, 1e-10f}) {
        EXPECT_EQ(c.encode(tiny, sat), 0x00u) << c.name << " " << tiny;
        EXPECT_EQ(c.encode(-tiny, sat), 0x80u) << c.name << " " << tiny;
      }
    }
  }
}

TEST(Fp8Encode, BitCodecFlagsMatchTheReference) {
  // A sweep over float bit patterns (every 4099th: all exponents, varied mantissas) in both
  // modes: the bit codec's code and saturation flag equal the reference's; flushed is
  // "non-zero, not NaN, became ±0".
  for (DType f : {DType::E4M3, DType::E5M2}) {
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
      for (bool sat : {true, false}) {
        bool ref_sat = false, got_sat = false, got_flush = false;
        const uint32_t want = minifloat_encode_reference(x, fp8_spec(f), sat, &ref_sat);
        const uint32_t got = f == DType::E4M3
                                 ? fp8_encode<DType::E4M3>(x, sat, &got_sat, &got_flush)
                                 : fp8_encode<DType::E5M2>(x, sat, &got_sat, &got_flush);
        ASSERT_EQ(got, want) << dtype_short_name(f) << " bits " << bits << " sat " << sat;
        ASSERT_EQ(got_sat, ref_sat) << dtype_short_name(f) << " bits " << bits;
        ASSERT_EQ(got_flush, x != 0 && !std::isnan(x) && (want & 0x7f) == 0) << bits;
      }
    }
  }
}

TEST(DType, NamesParse) {
  EXPECT_EQ(parse_fp8_format("e4m3"), DType::E4M3);
  EXPECT_EQ(parse_fp8_format("E5M2"), DType::E5M2);
  EXPECT_FALSE(parse_fp8_format("e3m4").has_value());
  EXPECT_FALSE(parse_fp8_format("").has_value());
}

}  // namespace
}  // namespace fp8lm
