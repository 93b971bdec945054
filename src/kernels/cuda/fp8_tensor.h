#pragma once
// How FP8 quantization state travels with a tensor on the device, as in TE's NVTETensor: the
// codes, the scale the producer multiplies by, and the amax it max-accumulates, all device
// pointers, so that no step waits on the host for a scale. Every FP8 producer (quantize,
// norms, activations, cast+transpose) takes an Fp8Out; its output dtype decides the fusion.
#include <cstdint>

#include "core/fp8_dtype.h"

namespace fp8lm::cuda {

struct Fp8Out {
  uint8_t* data = nullptr;       // codes, row-major like the FP32 tensor they encode
  const float* scale = nullptr;  // device: q = cast(x * *scale), saturating (satfinite)
  float* amax = nullptr;         // device: max-accumulated with max|x| of the unscaled input
  Fp8Format format = Fp8Format::E4M3;
  // Optional device counters (nullptr: not counted), added to: values whose |x * scale|
  // rounded past the format's max or were ±Inf, and non-zero values that became ±0. They
  // match CastStats of the CPU producers.
  unsigned long long* saturated = nullptr;
  unsigned long long* flushed = nullptr;
};

}  // namespace fp8lm::cuda
