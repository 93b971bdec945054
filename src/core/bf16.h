#pragma once
// bfloat16: the top half of an IEEE float. Encode rounds to nearest, ties to even; overflow
// goes to Inf as in IEEE 754 (bf16 has float's exponent range, so only values within half a
// bf16 ulp of FLT_MAX or beyond overflow). NaN stays a quiet NaN with its sign.
#include <cstdint>

#include "core/op_math.h"

namespace fp8lm {

using bf16_t = uint16_t;

FP8LM_OP bf16_t bf16_from_float(float x) {
  uint32_t u = op_math::bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases towards an even result;
  // a carry out of the mantissa correctly bumps the exponent (and reaches Inf at the top).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>(u >> 16);
}

FP8LM_OP float bf16_to_float(bf16_t h) {
  return op_math::from_bits(static_cast<uint32_t>(h) << 16);
}

}  // namespace fp8lm
