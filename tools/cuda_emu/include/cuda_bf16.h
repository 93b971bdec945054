#pragma once
// __nv_bfloat16: the upper 16 bits of a float, converted with round-to-nearest-even. A NaN
// becomes the canonical 0x7fff, as the GPU's cvt.rn.bf16.f32 makes it.
#include <bit>
#include <cstdint>

struct __nv_bfloat16 {
  unsigned short __x;  // trivially constructible, as on the device: shared arrays stay raw

  __nv_bfloat16() = default;
  __nv_bfloat16(float f);  // NOLINT: implicit, as CUDA's is
  operator float() const;  // NOLINT
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const auto u = std::bit_cast<uint32_t>(f);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.__x = 0x7fff;
  } else {
    h.__x = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return h;
}

inline __nv_bfloat16 __float2bfloat16(float f) {
  return __float2bfloat16_rn(f);
}

inline float __bfloat162float(__nv_bfloat16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.__x) << 16);
}

inline __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
inline __nv_bfloat16::operator float() const {
  return __bfloat162float(*this);
}

inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
  return h.__x;
}

typedef __nv_bfloat16 nv_bfloat16;
