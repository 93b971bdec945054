#pragma once
// Where the norm and activation kernels put their FP32 results: the NormOut they were given
// picks FP32, FP8 (codes plus statistics) or BF16. The choice is a template parameter of the
// kernel, so it costs no branch per element.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/norms.h"

namespace fp8lm::cuda {

enum class OutKind { F32, E4M3, E5M2, BF16 };

// The kind a NormOut asks for; exactly one output must be set, and FP8 needs its scale.
inline OutKind out_kind(const NormOut& out, const char* op) {
  const int set = (out.y != nullptr) + (out.y8.data != nullptr) + (out.y16 != nullptr);
  if (set != 1) {
    throw Error(std::string(op) + ": exactly one output (FP32, FP8 or BF16) must be given, got " +
                std::to_string(set));
  }
  if (out.y != nullptr) return OutKind::F32;
  if (out.y16 != nullptr) return OutKind::BF16;
  if (out.y8.scale == nullptr) throw Error(std::string(op) + ": FP8 output without a scale");
  return out.y8.format == Fp8Format::E4M3 ? OutKind::E4M3 : OutKind::E5M2;
}

// Calls f(std::integral_constant<OutKind, K>{}) for the runtime kind k: one kernel
// instantiation per kind.
template <typename F>
void with_out_kind(OutKind k, F&& f) {
  switch (k) {
    case OutKind::F32:
      return f(std::integral_constant<OutKind, OutKind::F32>{});
    case OutKind::E4M3:
      return f(std::integral_constant<OutKind, OutKind::E4M3>{});
    case OutKind::E5M2:
      return f(std::integral_constant<OutKind, OutKind::E5M2>{});
    case OutKind::BF16:
      return f(std::integral_constant<OutKind, OutKind::BF16>{});
  }
}

// One thread's writer. FP8 statistics gather per thread; finish() commits them and must be
// reached by every thread of the block (see commit_fp8_stats).
template <OutKind K>
struct OutWriter {
  static constexpr bool kFp8 = K == OutKind::E4M3 || K == OutKind::E5M2;

  NormOut out;
  float scale = 1.0f;
  Fp8Stats stats;

  __device__ explicit OutWriter(const NormOut& o) : out(o) {
    if constexpr (kFp8) scale = *o.y8.scale;
  }

  __device__ void put(int64_t i, float v) {
    if constexpr (K == OutKind::F32) {
      out.y[i] = v;
    } else if constexpr (K == OutKind::BF16) {
      out.y16[i] = bf16_round(v);
    } else if constexpr (K == OutKind::E4M3) {
      out.y8.data[i] = fp8_encode_counted<Fp8Format::E4M3>(v, scale, stats);
    } else {
      out.y8.data[i] = fp8_encode_counted<Fp8Format::E5M2>(v, scale, stats);
    }
  }

  __device__ void finish() {
    if constexpr (kFp8) commit_fp8_stats(stats, out.y8.amax, out.y8.saturated, out.y8.flushed);
  }
};

}  // namespace fp8lm::cuda
