#pragma once
// The FP8 decode a block-scaled recipe's BF16 operand is expanded from on the device, bit for
// bit with the CPU's table (fp8_decode_table). The scale rules themselves are the CPU's
// (core/e8m0.h, core/e2m1.h, fp8/fp8_block_quantize.h, fp8/nvfp4_quantize.h: one source for
// host and device). FP8LM_OP so that a host test holds the decode against the table
// (tests/test_cuda_block_cast.cpp); integer bit arithmetic, so no device math library rounding
// differs from the host's.
#include <cstdint>

#include "core/bf16.h"
#include "core/e8m0.h"
#include "core/fp8_dtype.h"

namespace fp8lm::cuda {

template <DType F>
FP8LM_OP bool fp8_is_nan(uint8_t code) {
  return F == DType::E4M3 ? (code & 0x7fu) == 0x7fu : (code & 0x7fu) > 0x7cu;
}

// The decoded value of a finite or infinite FP8 code, exactly (fp8_decode_table's).
template <DType F>
FP8LM_OP float fp8_value(uint8_t code) {
  constexpr int man = F == DType::E4M3 ? 3 : 2, bias = F == DType::E4M3 ? 7 : 15;
  const uint32_t sign = code >> 7, e = (code & 0x7fu) >> man, m = code & ((1u << man) - 1);
  float v;
  if (F == DType::E5M2 && e == 31) {
    v = op_math::from_bits(0x7f800000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * e8m0_decode(static_cast<uint8_t>(128 - bias - man));
  } else {
    v = op_math::from_bits((e - bias + 127) << 23 | m << (23 - man));
  }
  return sign ? -v : v;
}

// The decoded value of an FP8 code as the CPU's table holds it, as BF16 bits after a multiply
// by a power of two (exact): NaN codes give the table's NaN (quiet, with the code's sign)
// without going through a multiply, whose NaN a GPU would make canonical.
template <DType F>
FP8LM_OP uint16_t fp8_times_pow2_bf16(uint8_t code, float pow2) {
  if (fp8_is_nan<F>(code)) return static_cast<uint16_t>((code >> 7) << 15 | 0x7fc0u);
  return bf16_from_float(fp8_value<F>(code) * pow2);
}

}  // namespace fp8lm::cuda
