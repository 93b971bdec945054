#pragma once
// How the CPU's producer entries (norm_out.h, act_out.h) serve a ProducerOut: the FP32 kernel
// for FP32 (and, rounded, for BF16: the CPU producers compute in FP32 and rounding the FP32
// result is what the CUDA kernels do per element), the fused FP8 kernel for codes, whose cast
// statistics are then added into the descriptor's as the CUDA producers do.
#include <cmath>
#include <vector>

#include "fp8/quantize.h"
#include "kernels/cpu/casts.h"
#include "kernels/tensor.h"

namespace fp8lm::cpu {

// The amax max-accumulated (a NaN already there stays, as the scaling state keeps it; the
// cast's own amax ignores NaN), the counts added.
inline void commit_cast(const Fp8Out& q, const CastStats& st) {
  if (q.amax && !std::isnan(*q.amax) && st.amax > *q.amax) *q.amax = st.amax;
  if (q.saturated) *q.saturated += static_cast<unsigned long long>(st.saturated);
  if (q.flushed) *q.flushed += static_cast<unsigned long long>(st.flushed);
}

// fp32(float* y) computes n values into y; fp8(codes, scale, format) returns CastStats.
template <class Fp32, class Fp8>
void produce(const ProducerOut& out, int64_t n, const char* op, Fp32 fp32, Fp8 fp8) {
  switch (producer_out_dtype(out, op)) {
    case DType::F32:
      return fp32(out.y);
    case DType::BF16: {
      thread_local std::vector<float> y;
      y.resize(static_cast<size_t>(n));
      fp32(y.data());
      return fp32_to_bf16(out.y16, y.data(), n);
    }
    default:
      return commit_cast(out.y8, fp8(out.y8.data, *out.y8.scale, out.y8.format));
  }
}

}  // namespace fp8lm::cpu
