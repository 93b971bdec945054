#include "core/minifloat.h"

#include <cmath>

namespace fp8lm {

double minifloat_decode_reference(uint32_t code, const MinifloatSpec& spec) {
  const uint32_t man_mask = (1u << spec.man_bits) - 1;
  const uint32_t exp_all = (1u << spec.exp_bits) - 1;
  const uint32_t man = code & man_mask;
  const uint32_t exp = (code >> spec.man_bits) & exp_all;
  const double sign = (code & spec.sign_bit()) ? -1.0 : 1.0;
  if (exp == exp_all) {
    if (spec.specials == Specials::Ieee)
      return man == 0 ? sign * INFINITY : std::copysign(NAN, sign);
    if (spec.specials == Specials::NanOnly && man == man_mask) return std::copysign(NAN, sign);
  }
  if (exp == 0)
    return sign * std::ldexp(static_cast<double>(man), spec.min_normal_exp() - spec.man_bits);
  const double significand = 1.0 + std::ldexp(static_cast<double>(man), -spec.man_bits);
  return sign * std::ldexp(significand, static_cast<int>(exp) - spec.bias);
}

uint32_t minifloat_encode_reference(float x, const MinifloatSpec& spec, bool saturate,
                                    bool* saturated) {
  if (saturated) *saturated = false;
  const uint32_t sign = std::signbit(x) ? spec.sign_bit() : 0u;
  if (std::isnan(x)) return sign | spec.nan_code();
  const double max_finite = minifloat_decode_reference(spec.max_finite_code(), spec);
  const double a = std::fabs(static_cast<double>(x));
  double rounded = a;
  if (!std::isinf(a)) {
    // The spacing of representable values at a's binade (the subnormal spacing below min
    // normal); a / quantum is exact in double, so rint rounds once, ties to even.
    const int e =
        a >= std::ldexp(1.0, spec.min_normal_exp()) ? std::ilogb(a) : spec.min_normal_exp();
    const double quantum = std::ldexp(1.0, e - spec.man_bits);
    rounded = std::rint(a / quantum) * quantum;
  }
  if (rounded > max_finite) {
    if (saturated) *saturated = true;
    return sign | (saturate ? spec.max_finite_code() : spec.overflow_code());
  }
  if (rounded == 0.0) return sign;
  const int e = std::ilogb(rounded);
  if (e < spec.min_normal_exp()) {
    return sign | static_cast<uint32_t>(std::ldexp(rounded, spec.man_bits - spec.min_normal_exp()));
  }
  const auto man =
      static_cast<uint32_t>(std::ldexp(rounded, spec.man_bits - e)) - (1u << spec.man_bits);
  return sign | (static_cast<uint32_t>(e + spec.bias) << spec.man_bits) | man;
}

}  // namespace fp8lm
