#pragma once
// The reference codec for every narrow float format fp8lm uses (bf16, fp16, e4m3, e5m2, e2m1).
// It is the oracle the fast codecs are tested against: it rounds in double precision, where
// every float and every narrow value is exact, so it has no bit tricks to get wrong.
#include <cstdint>

namespace fp8lm {

// What a format's all-ones exponent field means.
enum class Specials : uint8_t {
  Ieee,     // Inf (mantissa 0) or NaN (IEEE 754, OCP E5M2)
  NanOnly,  // no Inf, one NaN mantissa (all ones) per sign (OCP E4M3)
  None,     // ordinary values: no Inf, no NaN (OCP E2M1)
};

struct MinifloatSpec {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  Specials specials;

  constexpr uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  constexpr int min_normal_exp() const { return 1 - bias; }
  constexpr uint32_t max_finite_code() const {
    uint32_t exp_all = (1u << exp_bits) - 1, man_all = (1u << man_bits) - 1;
    switch (specials) {
      case Specials::Ieee:
        return ((exp_all - 1) << man_bits) | man_all;
      case Specials::NanOnly:
        return (exp_all << man_bits) | (man_all - 1);
      case Specials::None:
        break;
    }
    return (exp_all << man_bits) | man_all;
  }
  // The quiet NaN this codec produces for a NaN input (sign added separately). A format
  // without NaN (E2M1) gives its largest magnitude: the block's scale is what carries a NaN
  // there (its amax is NaN).
  constexpr uint32_t nan_code() const {
    uint32_t exp_all = (1u << exp_bits) - 1;
    switch (specials) {
      case Specials::Ieee:
        return (exp_all << man_bits) | (1u << (man_bits - 1));
      case Specials::NanOnly:
        return (exp_all << man_bits) | ((1u << man_bits) - 1);
      case Specials::None:
        break;
    }
    return max_finite_code();
  }
  // Where an overflow goes without saturation: Inf if the format has one, else NaN, else (no
  // NaN either) the largest magnitude.
  constexpr uint32_t overflow_code() const {
    return specials == Specials::Ieee ? ((1u << exp_bits) - 1) << man_bits : nan_code();
  }
};

inline constexpr MinifloatSpec kBF16Spec{"bf16", 8, 7, 127, Specials::Ieee};
inline constexpr MinifloatSpec kFP16Spec{"fp16", 5, 10, 15, Specials::Ieee};
inline constexpr MinifloatSpec kE4M3Spec{"e4m3", 4, 3, 7, Specials::NanOnly};
inline constexpr MinifloatSpec kE5M2Spec{"e5m2", 5, 2, 15, Specials::Ieee};
// OCP MX v1.0's FP4: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, NVFP4's and MXFP4's element format.
inline constexpr MinifloatSpec kE2M1Spec{"e2m1", 2, 1, 1, Specials::None};

// Exact value of a code (NaN and ±Inf included).
double minifloat_decode_reference(uint32_t code, const MinifloatSpec& spec);

// Round-to-nearest-even encode. With saturate, finite values beyond max and ±Inf become ±max;
// without, they become Inf (or NaN where the format has no Inf). NaN stays NaN, sign kept.
// *saturated (optional) is set when the rounded magnitude exceeded max or the input was ±Inf.
uint32_t minifloat_encode_reference(float x, const MinifloatSpec& spec, bool saturate,
                                    bool* saturated = nullptr);

}  // namespace fp8lm
