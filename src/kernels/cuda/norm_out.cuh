#pragma once
// Where the norm and activation kernels put their FP32 results: the ProducerOut they were given
// picks FP32, FP8 (codes plus statistics) or BF16. The choice is a template parameter of the
// kernel, so it costs no branch per element.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "fp8lm/error.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/tensor.h"

namespace fp8lm::cuda {

// Calls f(std::integral_constant<DType, K>{}) for the runtime kind k: one kernel
// instantiation per kind.
template <typename F>
void with_out_dtype(DType k, F&& f) {
  switch (k) {
    case DType::F32:
      return f(std::integral_constant<DType, DType::F32>{});
    case DType::E4M3:
      return f(std::integral_constant<DType, DType::E4M3>{});
    case DType::E5M2:
      return f(std::integral_constant<DType, DType::E5M2>{});
    case DType::BF16:
      return f(std::integral_constant<DType, DType::BF16>{});
    default:
      return;  // producer_out_dtype yields only the four above
  }
}

// One thread's writer. FP8 statistics gather per thread; finish() commits them and must be
// reached by every thread of the block (see commit_fp8_stats).
template <DType K>
struct OutWriter {
  static constexpr bool kFp8 = K == DType::E4M3 || K == DType::E5M2;

  ProducerOut out;
  float scale = 1.0f;
  Fp8Stats stats;

  __device__ explicit OutWriter(const ProducerOut& o) : out(o) {
    if constexpr (kFp8) scale = *o.y8.scale;
  }

  __device__ void put(int64_t i, float v) {
    if constexpr (K == DType::F32) {
      out.y[i] = v;
    } else if constexpr (K == DType::BF16) {
      out.y16[i] = bf16_from_float(v);
    } else if constexpr (K == DType::E4M3) {
      out.y8.data[i] = fp8_encode_counted<DType::E4M3>(v, scale, stats);
    } else {
      out.y8.data[i] = fp8_encode_counted<DType::E5M2>(v, scale, stats);
    }
  }

  __device__ void finish() {
    if constexpr (kFp8) commit_fp8_stats(stats, out.y8.amax, out.y8.saturated, out.y8.flushed);
  }
};

}  // namespace fp8lm::cuda
