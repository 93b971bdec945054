#pragma once
// A GEMM shape timed on a device in BF16 and in FP8 (E4M3 operands with per-tensor scales), for
// `fp8lm advise` where a GPU is present: the measurement that replaces the roofline's estimate.
#include "kernels/backend.h"
#include "train/roofline.h"

namespace fp8lm {

struct MeasuredGemm {
  double bf16_s = 0, fp8_s = 0;  // the median of the timed calls, each alone on the device
};

// C = A · Bᵀ (TE's layout for every FP8 GEMM: wgrad's operands are transposed copies) on
// random operands: `warmup` untimed calls, then `reps` timed ones.
MeasuredGemm time_gemm(Backend& be, const GemmShape& g, int warmup = 3, int reps = 10);

}  // namespace fp8lm
