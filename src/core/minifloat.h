#pragma once
// The reference codec for every narrow float format fp8lm uses (bf16, fp16, e4m3, e5m2).
// It is the oracle the fast codecs are tested against: it rounds in double precision, where
// every float and every narrow value is exact, so it has no bit tricks to get wrong.
#include <cstdint>

namespace fp8lm {

struct MinifloatSpec {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  // true: an all-ones exponent field means Inf (mantissa 0) or NaN (IEEE 754 and OCP E5M2).
  // false: OCP E4M3, which has no Inf and one NaN mantissa (all ones) per sign.
  bool ieee_specials;

  constexpr int total_bits() const { return 1 + exp_bits + man_bits; }
  constexpr uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  constexpr int min_normal_exp() const { return 1 - bias; }
  constexpr uint32_t max_finite_code() const {
    uint32_t exp_all = (1u << exp_bits) - 1, man_all = (1u << man_bits) - 1;
    return ieee_specials ? ((exp_all - 1) << man_bits) | man_all
                         : (exp_all << man_bits) | (man_all - 1);
  }
  // The quiet NaN this codec produces for a NaN input (sign added separately).
  constexpr uint32_t nan_code() const {
    uint32_t exp_all = (1u << exp_bits) - 1;
    return ieee_specials ? (exp_all << man_bits) | (1u << (man_bits - 1))
                         : (exp_all << man_bits) | ((1u << man_bits) - 1);
  }
  // Where an overflow goes without saturation: Inf if the format has one, else NaN.
  constexpr uint32_t overflow_code() const {
    return ieee_specials ? ((1u << exp_bits) - 1) << man_bits : nan_code();
  }
};

inline constexpr MinifloatSpec kBF16Spec{"bf16", 8, 7, 127, true};
inline constexpr MinifloatSpec kFP16Spec{"fp16", 5, 10, 15, true};
inline constexpr MinifloatSpec kE4M3Spec{"e4m3", 4, 3, 7, false};
inline constexpr MinifloatSpec kE5M2Spec{"e5m2", 5, 2, 15, true};

// Exact value of a code (NaN and ±Inf included).
double minifloat_decode_reference(uint32_t code, const MinifloatSpec& spec);

// Round-to-nearest-even encode. With saturate, finite values beyond max and ±Inf become ±max;
// without, they become Inf (or NaN where the format has no Inf). NaN stays NaN, sign kept.
// *saturated (optional) is set when the rounded magnitude exceeded max or the input was ±Inf.
uint32_t minifloat_encode_reference(float x, const MinifloatSpec& spec, bool saturate,
                                    bool* saturated = nullptr);

}  // namespace fp8lm
