#include "fp8/nvfp4_quantize.h"

#include <cmath>
#include <limits>

#include "core/e2m1.h"
#include "core/fp8_dtype.h"

namespace fp8lm {

namespace {
constexpr float kFloatMax = std::numeric_limits<float>::max();
}  // namespace

float Nvfp4BlockScales::block() const {
  return fp8_decode(block_e4m3, Fp8Format::E4M3);
}

float Nvfp4BlockScales::decode() const {
  return block() * (1.0f / global_encode);
}

float nvfp4_global_encode_scale(float global_amax) {
  const float s = std::fmin(fp8_max(Fp8Format::E4M3) * kE2M1Max / global_amax, kFloatMax);
  return global_amax == 0.0f || s == 0.0f ? 1.0f : s;
}

Nvfp4BlockScales nvfp4_quantize_block(uint8_t* codes, const float* x, int64_t n,
                                      float global_amax) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  Nvfp4BlockScales s;
  s.global_encode = nvfp4_global_encode_scale(global_amax);
  s.block_e4m3 = fp8_encode(amax * (s.global_encode * (1.0f / kE2M1Max)), Fp8Format::E4M3);
  const float multiplier = std::fmin(1.0f / s.decode(), kFloatMax);
  for (int64_t i = 0; i < n; ++i) codes[i] = e2m1_encode(x[i] * multiplier);
  return s;
}

}  // namespace fp8lm
