// The one model of nn/ built on the CUDA backend against the same model on the CPU backend:
// same seed, same batch, forward loss, every parameter's gradient and the FP8 scaling state,
// with FP32, BF16 and FP8 GEMMs (delayed and current scaling). Skipped without a GPU.
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
#include "test_util.h"

namespace fp8lm {
namespace {

GPTConfig small_model() {
  // Every GEMM dimension a multiple of 16, as the demo's.
  return {.vocab = 32, .seq_len = 16, .d_model = 64, .n_layers = 2, .n_heads = 4, .ffn = 128};
}

// Llama's blocks: the device's rotary embeddings, grouped-query attention, unbiased layers and
// an untied head.
GPTConfig small_llama() {
  GPTConfig c = small_model();
  c.normalization = Normalization::RMSNorm;
  c.activation = Activation::Swiglu;
  c.n_kv_heads = 2;
  c.rope_theta = 10000;
  c.bias = false;
  c.tied_head = false;
  return c;
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

struct Mode {
  const char* name;
  Precision precision;
  ScalingKind scaling;  // FP8 only
};

const Mode kModes[] = {{"fp32", Precision::Fp32, ScalingKind::Delayed},
                       {"bf16", Precision::Bf16, ScalingKind::Delayed},
                       {"fp8 delayed", Precision::Fp8, ScalingKind::Delayed},
                       {"fp8 current", Precision::Fp8, ScalingKind::Current}};

Fp8Recipe recipe_of(const Mode& m) {
  Fp8Recipe r;
  r.kind = m.scaling;
  r.delayed.amax_history_len = 4;
  return r;
}

// Two training steps' forward and backward (no optimizer: the weights stay the same on both),
// as the trainer scopes them: FP8 inside an autocast, the rest of the model in BF16 then.
float steps(GPT& model, const Batch& b, const Mode& m) {
  const bool fp8 = m.precision == Precision::Fp8;
  const GemmPrecision precision(fp8 ? Precision::Bf16 : m.precision);
  if (fp8) model.init_fp8(recipe_of(m).delayed);
  float loss = 0;
  for (int i = 0; i < 2; ++i) {
    for (Parameter* p : model.parameters()) p->grad.zero();
    {
      const Autocast autocast(fp8, recipe_of(m));
      loss = model.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
    }
    model.backward();
  }
  return loss;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

TEST(CudaModel, ForwardAndBackwardMatchTheCpuBackend) {
  FP8LM_REQUIRE_CUDA();
  for (const bool llama : {false, true}) {
    const GPTConfig cfg = llama ? small_llama() : small_model();
    const Batch batch = make_batch(cfg);
    for (const Mode& m : kModes) {
      if (m.precision != Precision::Fp32 &&
          test::cuda_cc() < (m.precision == Precision::Fp8 ? 89 : 80))
        continue;
      SCOPED_TRACE(std::string(m.name) + (llama ? " llama" : ""));
      GPT cpu(cfg, 7), gpu(cfg, 7, cuda::backend(0));
      const float a = steps(cpu, batch, m), b = steps(gpu, batch, m);
      // Attention runs in BF16 on the GPU in every precision and a one-ulp difference before a
      // cast can move a value to the next BF16 code: the loss agrees to about 1e-3
      // (test_cuda_training.cpp's first-step bound).
      EXPECT_NEAR(a, b, 2e-3f * std::fabs(a));
      // The gradients pass back through every rounded operand again: 20x the loss's room,
      // relative to each tensor's largest gradient. Under FP8 the inputs are E4M3 and dY E5M2
      // (2^-4 and 2^-3 relative rounding): where the backends' FP32 values (1e-3 apart, from
      // the GPU's BF16 attention) straddle a rounding boundary an element moves by a whole code,
      // about 1% of elements per cast, and that compounds through each layer's casts, to 5-14%
      // of a tensor's norm in the first layer of this model (measured under the emulator; one
      // FP8 Linear with the same inputs agrees to the accumulation order, the test below). So
      // FP8 gradients are compared as tensors, within 20% in norm.
      const ParameterList pa = cpu.parameters(), pb = gpu.parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i) {
        const std::vector<float> ga = pa[i]->grad.to_host(), gb = pb[i]->grad.to_host();
        if (m.precision == Precision::Fp8) {
          double diff = 0, norm = 0;
          for (size_t j = 0; j < ga.size(); ++j) {
            diff += (static_cast<double>(ga[j]) - gb[j]) * (static_cast<double>(ga[j]) - gb[j]);
            norm += static_cast<double>(ga[j]) * ga[j];
          }
          EXPECT_LE(std::sqrt(diff), 0.2 * std::sqrt(norm) + 1e-12) << pa[i]->name;
          continue;
        }
        const double tol = 4e-2 * max_abs(ga) + 1e-12;
        for (size_t j = 0; j < ga.size(); ++j)
          ASSERT_NEAR(ga[j], gb[j], tol) << pa[i]->name << " at " << j;
      }
      // The FP8 state both backends' kernels wrote and updated: the same formats, history
      // lengths and cast sizes; each amax is one element of a tensor the casts above it moved,
      // so within 5% (the gradients' per-element room), and the scales follow within 10%.
      // Llama's SwiGLU multiplies two branches that each passed FP8 casts, so the largest
      // elements of its gradients move further (5.7% measured under the emulator): 10% there.
      const std::vector<Fp8Meta> sa = cpu.fp8_state(), sb = gpu.fp8_state();
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t g = 0; g < sa.size(); ++g) {
        for (Slot s : {Slot::Input, Slot::Weight, Slot::GradOutput}) {
          const ScalingState &x = sa[g][s], &y = sb[g][s];
          ASSERT_EQ(x.format, y.format);
          ASSERT_EQ(x.amax_history.size(), y.amax_history.size());
          for (size_t k = 0; k < x.amax_history.size(); ++k)
            EXPECT_NEAR(x.amax_history[k], y.amax_history[k],
                        (llama ? 1e-1f : 5e-2f) * x.amax_history[k])
                << "gemm " << g << " " << slot_name(s) << " [" << k << "]";
          EXPECT_NEAR(y.scale / x.scale, 1.0f, 0.1f) << "gemm " << g << " " << slot_name(s);
          EXPECT_EQ(x.last_cast.n, y.last_cast.n);
        }
      }
    }
  }
}

// One FP8 Linear with the same weights, input and output gradient on both backends: its codes
// are the same, so forward, dgrad and wgrad differ only in the accumulation order.
TEST(CudaModel, Fp8LinearMatchesTheCpuBackend) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 89) GTEST_SKIP() << "FP8 needs compute capability 8.9";
  const int64_t rows = 40, in = 48, out = 80;
  Linear a("fc", in, out, true), b("fc", in, out, true, cuda::backend(0));
  const std::vector<float> w = test::random_normal(in * out, 1, 0.0f, 0.2f),
                           bias = test::random_normal(out, 2),
                           x = test::random_normal(rows * in, 3),
                           dy = test::random_normal(rows * out, 4, 0.0f, 1e-3f);
  for (Linear* l : {&a, &b}) {
    l->weight().set_values(w);
    l->bias()->set_values(bias);
    l->weight().grad.zero();
    l->bias()->grad.zero();
  }
  Fp8Recipe r;
  r.delayed.amax_history_len = 2;
  std::vector<float> ya(rows * out), dxa(rows * in, 0.0f);
  BackendBuffer<float> xb(cuda::backend(0), x), yb(cuda::backend(0), ya.size()),
      dyb(cuda::backend(0), dy), dxb(cuda::backend(0), dxa);
  for (int step = 0; step < 2; ++step) {  // the second with scales from the first's amaxes
    {
      const Autocast fp8(true, r);
      a.forward(x.data(), ya.data(), rows);
      b.forward(xb.data(), yb.data(), rows);
    }
    a.backward(dy.data(), dxa.data(), rows, false);
    b.backward(dyb.data(), dxb.data(), rows, false);
    a.scaling().update(Direction::Backward, r.delayed);
    b.scaling().update(Direction::Backward, r.delayed);
  }
  // The deepest of the three GEMMs sums K = 80 products (dgrad over out). FP8 tensor cores keep
  // about 14 bits between cuBLASLt's promotions to FP32 (test_backend_ops' unit, 2^-13 per
  // term), so (K + 4) units of the largest value: about 1% of it, far below what a wrong
  // scale_inv (a power of two or more) or a transposed operand changes.
  const auto close = [](const std::vector<float>& u, const std::vector<float>& v,
                        const char* what) {
    ASSERT_EQ(u.size(), v.size());
    const double tol = (80 + 4) * 0x1p-13 * max_abs(u);
    for (size_t i = 0; i < u.size(); ++i) ASSERT_NEAR(u[i], v[i], tol) << what << " at " << i;
  };
  close(ya, yb.to_host(), "y");
  close(dxa, dxb.to_host(), "dx");
  close(a.weight().grad.to_host(), b.weight().grad.to_host(), "dW");
  close(a.bias()->grad.to_host(), b.bias()->grad.to_host(), "db");
}

// Greedy generation with the KV cache on the GPU: the tokens the CPU backend picks. Token
// embeddings of N(0, 1) (not GPT-2's 0.02) make each step's largest logit stand clear of the
// next, so the GPU's BF16 attention cannot swap them.
TEST(CudaModel, KvCacheGenerationMatchesTheCpuBackend) {
  FP8LM_REQUIRE_CUDA();
  for (const GPTConfig& cfg : {small_model(), small_llama()}) {
    GPT cpu(cfg, 7), gpu(cfg, 7, cuda::backend(0));
    const std::vector<float> wte = test::random_normal(cfg.vocab * cfg.d_model, 5);
    cpu.token_embedding().set_values(wte);
    gpu.token_embedding().set_values(wte);
    cpu.head_weight().set_values(wte);  // the token embedding itself when tied
    gpu.head_weight().set_values(wte);
    const int64_t B = 3, P = 4, n_new = 10;
    std::vector<int32_t> prompts;
    for (int64_t i = 0; i < B * P; ++i) prompts.push_back(static_cast<int32_t>((i * 5 + 2) % 32));
    const std::vector<int32_t> want = cpu.generate(prompts.data(), B, P, n_new);
    EXPECT_EQ(gpu.generate(prompts.data(), B, P, n_new), want) << cfg.rope_theta;
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
