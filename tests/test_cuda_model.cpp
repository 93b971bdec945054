// The one model of nn/ built on the CUDA backend against the same model on the CPU backend:
// same seed, same batch, forward loss and every parameter's gradient. So far FP32 and BF16
// GEMMs (the FP8 scaling state moves into backend memory next, docs/ARCHITECTURE.md).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/precision.h"
#include "cuda_test_util.h"
#include "fp8lm/error.h"
#include "nn/autocast.h"
#include "nn/fusion.h"
#include "nn/gpt.h"

namespace fp8lm {
namespace {

GPTConfig small_model() {
  // Every GEMM dimension a multiple of 16, as the demo's.
  return {.vocab = 32, .seq_len = 16, .d_model = 64, .n_layers = 2, .n_heads = 4, .ffn = 128};
}

struct Batch {
  int64_t B = 3, T = 16;
  std::vector<int32_t> tokens, targets;
};

Batch make_batch(const GPTConfig& cfg) {
  Batch b;
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    b.tokens.push_back(static_cast<int32_t>((i * 7 + 3) % cfg.vocab));
    b.targets.push_back(i % 11 == 5 ? -1 : static_cast<int32_t>((i * 5 + 1) % cfg.vocab));
  }
  return b;
}

float step(GPT& model, const Batch& b) {
  for (Parameter* p : model.parameters()) p->grad.zero();
  const float loss = model.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  model.backward();
  return loss;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

TEST(CudaModel, ForwardAndBackwardMatchTheCpuBackend) {
  FP8LM_REQUIRE_CUDA();
  const GPTConfig cfg = small_model();
  const Batch batch = make_batch(cfg);
  for (const Precision p : {Precision::Fp32, Precision::Bf16}) {
    if (p == Precision::Bf16 && test::cuda_cc() < 80) continue;
    SCOPED_TRACE(std::string(precision_name(p)));
    GPT cpu(cfg, 7), gpu(cfg, 7, cuda::backend(0));
    const GemmPrecision precision(p);
    const float a = step(cpu, batch), b = step(gpu, batch);
    // Attention runs in BF16 on the GPU in every precision and a one-ulp difference before a
    // cast can move a value to the next BF16 code: the loss agrees to about 1e-3
    // (test_cuda_training.cpp's first-step bound).
    EXPECT_NEAR(a, b, 2e-3f * std::fabs(a));
    // The gradients pass back through every rounded operand again: 20x the loss's room,
    // relative to each tensor's largest gradient.
    const ParameterList pa = cpu.parameters(), pb = gpu.parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      const std::vector<float> ga = pa[i]->grad.to_host(), gb = pb[i]->grad.to_host();
      const double tol = 4e-2 * max_abs(ga) + 1e-12;
      for (size_t j = 0; j < ga.size(); ++j)
        ASSERT_NEAR(ga[j], gb[j], tol) << pa[i]->name << " at " << j;
    }
  }
}

TEST(CudaModel, AnOpTheGpuLacksIsRefusedWithItsName) {
  FP8LM_REQUIRE_CUDA();
  const GPTConfig cfg = small_model();
  const Batch batch = make_batch(cfg);
  GPT gpu(cfg, 7, cuda::backend(0));
  const FusionScope unfused(false);
  try {
    gpu.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
    FAIL() << "the unfused twins ran on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not available on cuda:0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp8lm
