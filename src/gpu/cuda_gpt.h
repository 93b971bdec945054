#pragma once
// The GPT of nn/gpt.h on a CUDA device: the same layers, names and math, with every tensor in
// device memory and every op a CUDA kernel (kernels/cuda). The host GPT it is built from stays
// the mirror that checkpoints, inspect and the metrics read: upload() and download() move
// weights, AdamW moments and FP8 scaling state between them, so a checkpoint written from one
// backend loads on the other.
//
// Built without the CUDA backend, constructing one throws Error.
#include <cstdint>
#include <memory>
#include <vector>

#include "fp8/recipe.h"
#include "nn/gpt.h"

namespace fp8lm {

struct CudaGptOptions {
  int device = 0;
  GemmMode mode = GemmMode::Fp32;  // the Linears' GEMMs: fp8 (autocast), bf16 or fp32
  Fp8Recipe recipe;                // fp8: delayed scaling only
  bool fp8_weights = false;        // TE's fp8_model_init: weights kept as FP8 codes
  // AdamW (train/adamw.h's update, decay on the parameters marked to decay).
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class CudaGPT {
 public:
  // Uploads the host model's weights and FP8 state. Throws Error when the shapes cannot run
  // in FP8 on the device (dimensions not multiples of 16) or the recipe is not delayed scaling.
  CudaGPT(GPT& host, const CudaGptOptions& options);
  ~CudaGPT();
  CudaGPT(const CudaGPT&) = delete;
  CudaGPT& operator=(const CudaGPT&) = delete;

  struct StepResult {
    float loss = 0, grad_norm = 0;
  };
  // One training step: forward with the loss, backward, the FP8 scale updates, the global
  // gradient norm, clipping folded into one fused AdamW over every parameter (step number t,
  // counted from 1) that also re-quantizes FP8 weights.
  StepResult train_step(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                        float lr, float grad_clip, int64_t t);
  // Mean loss of one batch without gradients; FP8 scaling state left exactly as it was.
  float loss(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  // Greedy generation (nn/gpt.h's contract): each new token from a forward over the sequence
  // so far. FP8 forward scales update once at the end, as an autocast scope around it would.
  std::vector<int32_t> generate(const int32_t* prompts, int64_t B, int64_t P, int64_t n_new);

  // Host mirror <-> device. Moments: one vector per host parameter, in parameters() order.
  void upload();
  void download();
  void upload_moments(const std::vector<std::vector<float>>& m,
                      const std::vector<std::vector<float>>& v);
  void download_moments(std::vector<std::vector<float>>& m,
                        std::vector<std::vector<float>>& v) const;
  void download_fp8_state();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8lm
