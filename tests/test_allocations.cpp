// A steady-state training step allocates nothing: every buffer (saved activations, shared
// scratch, GEMM workspaces and oneDNN's scratchpad, the optimizer's chunk lists) is sized by
// the first steps and reused. The only allocations left are oneDNN's own per-call bookkeeping
// inside primitive execute (a few small objects), which the counter below leaves out.
// Own binary: it replaces the global operator new.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "kernels/cpu/gemm.h"
#include "nn/autocast.h"
#include "nn/fusion.h"
#include "nn/gpt.h"
#include "train/adamw.h"

namespace {
std::atomic<long> ours{0}, onednn{0};
}  // namespace

// Out of line: inlined into a new-expression's caller, GCC 12 pairs the new with the free below
// and warns (-Wmismatched-new-delete) in optimized builds such as the sanitizer's.
[[gnu::noinline]] void* operator new(size_t n) {
  (fp8lm::cpu::inside_onednn_execute() ? onednn : ours).fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace fp8lm {
namespace {

struct StepCounts {
  long ours, onednn;
};

// reduce: the amax reduction across processes a data-parallel run passes (here one that
// changes nothing), which the scaling updates then run.
StepCounts count_steady_step(Precision p, bool fusion, const AmaxReducer& reduce = {}) {
  GPTConfig cfg{.vocab = 32, .seq_len = 16, .d_model = 64, .n_layers = 2, .n_heads = 4, .ffn = 128};
  GPT model(cfg, 1);
  AdamW opt(model.parameters(), AdamWConfig{});
  const int64_t B = 4, T = 16;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i)
    tokens[i] = static_cast<int32_t>(i % 32), targets[i] = static_cast<int32_t>((i + 1) % 32);
  Fp8Recipe recipe;
  recipe.delayed.amax_history_len = 4;
  model.init_fp8(recipe.delayed);
  const auto step = [&] {  // what Trainer::train_step runs between drawing a batch and logging
    const FusionScope fused(fusion);
    const GemmPrecision gemm(p == Precision::Fp32 ? Precision::Fp32 : Precision::Bf16);
    opt.zero_grad();
    {
      const Autocast autocast(p == Precision::Fp8, recipe, reduce);
      model.forward(tokens.data(), targets.data(), B, T);
    }
    model.backward();
    const float norm = grad_norm(opt.parameters());
    opt.step(1e-3f, clip_factor(norm, 1.0f));
  };
  for (int i = 0; i < 3; ++i) step();
  const long ours0 = ours.load(), onednn0 = onednn.load();
  step();
  return {ours.load() - ours0, onednn.load() - onednn0};
}

TEST(Allocations, SteadyStateStepAllocatesNothingOfItsOwn) {
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp8}) {
    const StepCounts c = count_steady_step(p, /*fusion=*/true);
    EXPECT_EQ(c.ours, 0) << precision_name(p);
    // oneDNN 2.6's execute keeps a handful of small bookkeeping objects per call; more would
    // mean its scratchpad (now ours, from an arena) is being allocated again.
    EXPECT_LT(c.onednn, 8 * 64) << precision_name(p);
  }
}

TEST(Allocations, AmaxReductionAllocatesNothingPerStep) {
  // Issue 34: the reduction's gather buffers are kept from step to step (on a GPU an
  // allocation per step synchronises the device).
  const StepCounts c = count_steady_step(Precision::Fp8, /*fusion=*/true, [](std::span<float>) {});
  EXPECT_EQ(c.ours, 0);
}

}  // namespace
}  // namespace fp8lm
