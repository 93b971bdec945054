#pragma once
// The two OCP 8-bit float formats (docs/reference/numerics.md) as scalar codecs. Encode is
// round to nearest, ties to even; saturating by default (finite overflow and ±Inf become ±max,
// as GPUs do with satfinite), or non-saturating (overflow becomes Inf in E5M2, NaN in E4M3).
// Decode is exact.
// These bit-level codecs are the ones the kernels vectorize; minifloat.h is their oracle.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "core/minifloat.h"
#include "core/op_math.h"

namespace fp8lm {

// Accepts e4m3 / e5m2 in any case (dtype_short_name's names); nullopt for anything else.
std::optional<DType> parse_fp8_format(std::string_view name);

constexpr const MinifloatSpec& fp8_spec(DType f) {
  return f == DType::E4M3 ? kE4M3Spec : kE5M2Spec;
}
// Largest finite magnitude: 448 (E4M3), 57344 (E5M2).
constexpr float fp8_max(DType f) {
  return f == DType::E4M3 ? 448.0f : 57344.0f;
}
// Smallest positive (subnormal) value: 2^-9 (E4M3), 2^-16 (E5M2).
constexpr float fp8_min_subnormal(DType f) {
  return f == DType::E4M3 ? 0x1p-9f : 0x1p-16f;
}

// Bit-level constants of a format, shared by the scalar and SIMD encoders.
struct Fp8Consts {
  int man_shift;             // 23 - mantissa bits: float mantissa bits dropped
  uint32_t rebias;           // (127 - bias) << 23, subtracted to move to the FP8 exponent
  uint32_t min_normal_bits;  // float bits of 2^(1-bias); below it the result is subnormal
  float subnormal_magic;     // 2^(1-bias-mantissa+23): adding it rounds to the subnormal spacing
  uint32_t magic_bits;
  uint32_t max_code;       // largest finite magnitude code
  uint32_t overflow_code;  // non-saturating overflow: Inf (E5M2) or NaN (E4M3)
  uint32_t nan_code;       // produced for NaN inputs
};

constexpr Fp8Consts fp8_consts(DType f) {
  if (f == DType::E4M3)
    return {20, 120u << 23, 0x3c800000u, 0x1p14f, 0x46800000u, 0x7e, 0x7f, 0x7f};
  return {21, 112u << 23, 0x38800000u, 0x1p7f, 0x43000000u, 0x7b, 0x7c, 0x7e};
}

// Encodes one float. *saturated / *flushed (optional) report overflow past max (or ±Inf) and
// a non-zero input that became ±0.
// One source for the host and the device (op_math); device code reads the constexpr
// fp8_consts, so .cu files including this need --expt-relaxed-constexpr. Not the PTX
// conversion behind __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...): that one turns every NaN
// into 0x7f (the sign dropped; this keeps it, and gives 0x7e in E5M2), and the flags need the
// unbounded code.
template <DType F>
FP8LM_OP uint8_t fp8_encode(float x, bool saturate = true, bool* saturated = nullptr,
                            bool* flushed = nullptr) {
  constexpr Fp8Consts c = fp8_consts(F);
  const uint32_t u = op_math::bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (saturated) *saturated = false;
  if (flushed) *flushed = false;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | c.nan_code);
  uint32_t code;
  if (a < c.min_normal_bits) {
    // The FPU's own round-to-nearest-even does the work: the magic number's ulp equals the
    // subnormal spacing, so the sum's low bits count spacings (reaching min normal exactly).
    code = op_math::bits(op_math::add(op_math::from_bits(a), c.subnormal_magic)) - c.magic_bits;
    if (flushed) *flushed = a != 0 && code == 0;
  } else {
    // Rebias and drop the low mantissa bits, ties to even; a carry bumps the exponent. The
    // code is computed unbounded, so anything past max (Inf included) compares above it.
    const uint32_t half_minus_one = (1u << (c.man_shift - 1)) - 1;
    code = (a - c.rebias + half_minus_one + ((a >> c.man_shift) & 1u)) >> c.man_shift;
  }
  if (code > c.max_code) {
    if (saturated) *saturated = true;
    code = saturate ? c.max_code : c.overflow_code;
  }
  return static_cast<uint8_t>(sign | code);
}

inline uint8_t fp8_encode(float x, DType f, bool saturate = true) {
  return f == DType::E4M3 ? fp8_encode<DType::E4M3>(x, saturate)
                          : fp8_encode<DType::E5M2>(x, saturate);
}

// All 256 decoded values of a format (exact; NaN codes decode to NaN).
const std::array<float, 256>& fp8_decode_table(DType f);

inline float fp8_decode(uint8_t code, DType f) {
  return fp8_decode_table(f)[code];
}

}  // namespace fp8lm
