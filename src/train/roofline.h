#pragma once
// Will FP8 pay off? A roofline model of a training step on a GPU (issue 32, `fp8lm advise`):
// each GEMM of the model in BF16 and under an FP8 recipe, its time the larger of its arithmetic
// at the GPU's dense peak and its memory traffic at the GPU's bandwidth, plus the casts the
// recipe adds (each a pass over memory); the rest of the step (attention, norms, activations,
// the LM head) the same in both. Every figure it assumes is in roofline_assumptions();
// docs/guide/will-fp8-pay-off.md derives the model.
#include <cstdint>
#include <string>
#include <vector>

#include "fp8lm/recipe.h"
#include "fp8lm/train_config.h"

namespace fp8lm {

// A GPU's dense peaks by its vendor's datasheet.
struct GpuPeaks {
  std::string name;
  double bf16_tflops = 0, fp8_tflops = 0, fp4_tflops = 0;  // dense, no sparsity
  double memory_tb_per_s = 0;
  bool mxfp8_native = false, nvfp4_native = false;  // block-scaled tensor cores (Blackwell)
};

// H100 SXM, H200 SXM, B200.
const std::vector<GpuPeaks>& datasheet_gpus();

// One GEMM of a step: C[M, N] = A[M, K] · B[K, N], `per_step` times (once per layer).
struct GemmShape {
  std::string name;  // "fc1 fprop"
  int64_t M = 0, N = 0, K = 0;
  int64_t per_step = 0;
};

// The GEMMs the recipe runs in FP8 (every Linear of every layer; the LM head stays BF16), each
// Linear's fprop (Y = X Wᵀ), dgrad (dX = dY W) and wgrad (dW = dYᵀ X).
std::vector<GemmShape> fp8_gemms(const TrainConfig& c);

struct GemmEstimate {
  double bf16_s = 0;   // the GEMM in BF16
  double fp8_s = 0;    // the GEMM under the recipe (BF16 where the GPU cannot run the recipe)
  double cast_s = 0;   // the casts the recipe adds for this GEMM's operands
  bool native = true;  // whether the GPU's tensor cores run the recipe's format
};

GemmEstimate estimate_gemm(const GemmShape& g, const GpuPeaks& gpu, ScalingKind recipe);

struct StepEstimate {
  double gemm_bf16_s = 0, gemm_fp8_s = 0, cast_s = 0;
  double other_s = 0;  // attention, LM head, norms, activations, optimizer: the same in both
  double bf16_s() const { return gemm_bf16_s + other_s; }
  double fp8_s() const { return gemm_fp8_s + cast_s + other_s; }
  double speedup() const { return bf16_s() / fp8_s(); }
};

StepEstimate estimate_step(const TrainConfig& c, const GpuPeaks& gpu, ScalingKind recipe);

// The model's assumptions, one sentence each, for the output.
std::vector<std::string> roofline_assumptions();

}  // namespace fp8lm
