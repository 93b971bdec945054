// Training on the GPU (the one model of nn/ on the CUDA backend): the demo learns in every
// precision, the first step agrees with the CPU's, runs are deterministic and resume bit for bit,
// and a checkpoint moves between the backends in both directions. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "demo_config.h"
#include "fallback_check.h"
#include "fp8/recipe.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "kernels/cuda/block_gemm.h"
#include "kernels/cuda/op_times.h"
#include "kernels/cuda/step_graph.h"
#include "kernels/op_times.h"
#include "run_util.h"
#include "skip_check.h"
#include "train/trainer.h"

#ifdef FP8LM_CUDA_EMU
#include <emu/host_syncs.h>
#endif

namespace fp8lm {
namespace {

namespace fs = std::filesystem;

TrainConfig demo(Precision p, DeviceSpec::Kind device) {
  TrainConfig c = test::small_stride_demo();
  c.precision = p;
  c.recipe.delayed.amax_history_len = 16;
  c.device = {device, 0};
  return c;
}

struct Variant {
  const char* name;
  Precision precision;
  Format format;
  bool fp8_weights;
};

const Variant kVariants[] = {{"fp32", Precision::Fp32, Format::Hybrid, false},
                             {"bf16", Precision::Bf16, Format::Hybrid, false},
                             {"fp8 hybrid", Precision::Fp8, Format::Hybrid, false},
                             {"fp8 e4m3 fp8-weights", Precision::Fp8, Format::E4M3, true}};

TrainConfig variant(const Variant& v, DeviceSpec::Kind device) {
  TrainConfig c = demo(v.precision, device);
  c.recipe.delayed.format = v.format;
  c.fp8_weights = v.fp8_weights;
  return c;
}

TEST(CudaTraining, DemoLearnsInEveryPrecision) {
  FP8LM_REQUIRE_CUDA();
  for (const Variant& v : kVariants) {
    if (v.precision == Precision::Fp8 && test::cuda_cc() < 89) continue;
    const TrainResult r = train(variant(v, DeviceSpec::Cuda));
    // Chance is 1/32; the CPU reaches about 1.0 on this demo in every precision.
    EXPECT_GE(r.stride_accuracy, 0.95) << v.name;
    EXPECT_LT(r.final_loss, 0.5f) << v.name;
    EXPECT_TRUE(std::isfinite(r.final_loss)) << v.name;
  }
}

// The skip checks' runs (tests/skip_check.h) in FP32 and, where the GPU has FP8, in FP8.
std::vector<TrainConfig> skip_cases() {
  std::vector<TrainConfig> cases;
  for (Precision p : {Precision::Fp32, Precision::Fp8}) {
    if (p == Precision::Fp8 && test::cuda_cc() < 89) continue;
    TrainConfig c = demo(p, DeviceSpec::Cuda);
    c.recipe.delayed.amax_history_len = 4;
    c.evaluate = false;
    cases.push_back(c);
  }
  return cases;
}

// A NaN in a weight: the step is skipped on the GPU as on the CPU (tests/skip_check.h).
TEST(CudaTraining, NonFiniteStepIsSkipped) {
  FP8LM_REQUIRE_CUDA();
  for (const TrainConfig& c : skip_cases()) {
    SCOPED_TRACE(precision_name(c.precision));
    test::expect_poisoned_step_is_skipped(c, 2);
  }
}

// Issue 34: steps launched without waiting and read together give the bits of steps read as
// they end, a skipped one among them (tests/skip_check.h).
TEST(CudaTraining, StepsReadTogetherMatchStepsReadAsTheyEnd) {
  FP8LM_REQUIRE_CUDA();
  for (TrainConfig c : skip_cases()) {
    SCOPED_TRACE(precision_name(c.precision));
    c.fp8_fallback = false;
    c.batch_size = 4;  // the emulator's time
    test::expect_steps_read_later_match_steps_read_as_they_end(c);
  }
}

// Issue 34: a GPU run reads its steps in groups (RunSchedule::steps_between_reads), yet its
// metrics.jsonl has every step, in order, with the loss the trainer kept, and a stop reads the
// steps before it.
TEST(CudaTraining, ARunReadInGroupsRecordsEveryStepInOrder) {
  FP8LM_REQUIRE_CUDA();
  TrainConfig c = demo(Precision::Bf16, DeviceSpec::Cuda);
  c.evaluate = false;
  c.batch_size = 4;  // the emulator's time
  c.steps = 24;
  Trainer t(c);
  ASSERT_TRUE(t.reading_waits());
  const std::string dir = test::fresh_dir("cuda_grouped_reads");
  ASSERT_EQ(
      test::train_in_dir(t, dir, {.stop_after = 19, .val_every = 0, .steps_between_reads = 8}),
      RunEnd::Stopped);
  EXPECT_EQ(t.unread_steps(), 0u);
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  int64_t step = 0;
  while (std::getline(metrics, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ++step;
    ASSERT_EQ(j["step"].get<int64_t>(), step);
    EXPECT_EQ(j["loss"].get<float>(), t.losses()[static_cast<size_t>(step - 1)]) << step;
  }
  EXPECT_EQ(step, 19);
  EXPECT_EQ(t.steps_done(), 19);
}

// The automatic BF16 fallback on the GPU backend, on the CPU's reproducible case
// (tests/fallback_check.h): a corrupted FP8 scale is survived by moving its GEMM to BF16.
TEST(CudaTraining, Bf16FallbackSurvivesACorruptedScale) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 89) GTEST_SKIP() << "FP8 GEMMs need compute capability 8.9";
  test::expect_fallback_survives_a_corrupted_scale(demo(Precision::Fp8, DeviceSpec::Cuda));
}

TEST(CudaTraining, FirstStepMatchesTheCpu) {
  FP8LM_REQUIRE_CUDA();
  for (const Variant& v : kVariants) {
    if (v.precision == Precision::Fp8 && test::cuda_cc() < 89) continue;
    Trainer cpu(variant(v, DeviceSpec::Cpu)), gpu(variant(v, DeviceSpec::Cuda));
    const StepStats a = cpu.train_step(), b = gpu.train_step();
    // Same weights, same batch. Attention runs in BF16 on the GPU in every precision (the CPU's
    // is FP32, with BF16 saved q/k/v under bf16/fp8), and an FP32 difference of one ulp before
    // a cast can move a value to the next BF16/FP8 code: the loss agrees to about 1e-3.
    const float tol = 2e-3f;
    EXPECT_NEAR(a.loss, b.loss, tol * std::fabs(a.loss)) << v.name;
    // The gradient passes back through every rounded operand again (and the CPU's backward
    // reads BF16 saved activations the GPU keeps in FP32), so its norm gets 20x the loss's
    // room: 4%. In a host emulation of this GPU code it agreed to 3e-3 at worst (fp8 e4m3).
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 20 * tol * a.grad_norm) << v.name;
    // AdamW's first step moves each weight by lr * g / (|g| + eps), about ±lr: where a
    // near-zero gradient has opposite signs on the two backends, the weights differ by 2 lr.
    // The first step's lr is warmup's 3e-4, so 2 lr = 6e-4, within 3e-3.
    const ParameterList pa = cpu.model().parameters(), pb = gpu.model().parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      const std::vector<float> wa = pa[i]->values(), wb = pb[i]->values();
      for (size_t j = 0; j < wa.size(); ++j) {
        ASSERT_NEAR(wa[j], wb[j], 3e-3f) << v.name << " " << pa[i]->name;
      }
    }
  }
}

// Issue 34: how often a steady-state training step makes the host wait for the GPU, counted by
// the emulator (emu/host_syncs.h; a GPU has no such counter, so this runs there only). Uploads
// go through pinned staging, the targets are checked on the host before upload, the weight
// casts' freshness is a host-side version, and the step is decided on the device (the skip,
// the clipping and AdamW's step count: Trainer::launch_step), so launching steps never waits:
// zero per step, with one or two micro-batches. One read then brings every launched step's
// row losses, norm, decision and FP8 saturation counters. A step the host decides itself
// (--fp8-weights: the weights are cast again only after an update) reads its losses and norm,
// then the counters after the recast: two waits.
TEST(CudaTraining, StepHostSynchronisations) {
  FP8LM_REQUIRE_CUDA();
#ifndef FP8LM_CUDA_EMU
  GTEST_SKIP() << "the emulator counts host synchronisations";
#else
  for (const Variant& v : kVariants) {
    for (const int64_t micro_batches : {1, 2}) {
      if (micro_batches == 2 && v.precision != Precision::Fp8) continue;  // one case shows it
      SCOPED_TRACE(std::string(v.name) + ", micro-batches " + std::to_string(micro_batches));
      TrainConfig c = variant(v, DeviceSpec::Cuda);
      c.evaluate = false;
      c.grad_accum = micro_batches;
      c.batch_size = 4;  // the waits do not depend on it; the emulator's time does
      Trainer gpu(c);
      for (int warm = 0; warm < 2; ++warm) gpu.train_step();  // buffers grown, plans made
      const unsigned long long before = emu::host_synchronizations();
      if (!gpu.decided_on_backend()) {
        ASSERT_TRUE(c.fp8_weights);
        gpu.train_step();
        EXPECT_EQ(emu::host_synchronizations() - before, 2u);
        continue;
      }
      for (int s = 0; s < 2; ++s) gpu.launch_step();
      EXPECT_EQ(emu::host_synchronizations() - before, 0u) << "launching two steps";
      EXPECT_EQ(gpu.unread_steps(), 2u);
      const std::vector<StepStats> read = gpu.read_steps();
      EXPECT_EQ(emu::host_synchronizations() - before, 1u) << "reading them";
      ASSERT_EQ(read.size(), 2u);
      for (size_t i = 0; i < read.size(); ++i) {
        EXPECT_EQ(read[i].step, 3 + static_cast<int64_t>(i));
        EXPECT_TRUE(std::isfinite(read[i].loss));
        EXPECT_GT(read[i].grad_norm, 0.0f);
        EXPECT_FALSE(read[i].skipped);
      }
      EXPECT_EQ(gpu.optimizer().steps(), 4);
    }
  }
#endif
}

// Issue 34: a steady step runs as one CUDA graph, captured afresh every step (so every host
// decision is the step's own) and launched whole, the executable graph updated in place while
// the steps keep their shape. The same bits as steps launched op by op (--no-cuda-graphs), in
// every precision and recipe and with micro-batches, with every step in flight before one read
// (their staging buffers and read slots all differ) or (one case) each read as it ends; and
// with graphs the steps still make the host wait nowhere (StepHostSynchronisations).
TEST(CudaTraining, StepsAsGraphsGiveTheBitsOfStepsLaunchedOpByOp) {
  FP8LM_REQUIRE_CUDA();
  struct Case {
    const char* name;
    Precision precision;
    ScalingKind kind;
    int64_t micro_batches;
  };
  const Case cases[] = {{"bf16", Precision::Bf16, ScalingKind::Delayed, 1},
                        {"delayed, 2 micro-batches", Precision::Fp8, ScalingKind::Delayed, 2},
                        {"current", Precision::Fp8, ScalingKind::Current, 1},
                        {"block", Precision::Fp8, ScalingKind::Block, 1},
                        {"mxfp8", Precision::Fp8, ScalingKind::Mxfp8, 1},
                        {"nvfp4", Precision::Fp8, ScalingKind::Nvfp4, 1}};
  for (const Case& k : cases) {
    if (k.precision == Precision::Fp8 && test::cuda_cc() < 89) continue;
    SCOPED_TRACE(k.name);
    TrainConfig c = demo(k.precision, DeviceSpec::Cuda);
    c.recipe.kind = k.kind;
    c.grad_accum = k.micro_batches;
    c.batch_size = 4;
    c.steps = 5;
    c.evaluate = false;
    struct Run {
      std::vector<float> losses, norms, weights;
      cuda::StepGraph::Counts graphs;
    };
    const auto run = [&](bool graphs, bool read_each) {
      Trainer t(c);
      t.set_cuda_graphs(graphs);
      const cuda::StepGraph::Counts before = cuda::StepGraph::counts();
      Run r;
      std::vector<StepStats> read;
      while (!t.done()) {
        t.launch_step();
        if (read_each || t.done())
          for (const StepStats& s : t.read_steps()) read.push_back(s);
      }
      for (const StepStats& s : read) {
        r.losses.push_back(s.loss);
        r.norms.push_back(s.grad_norm);
      }
      for (Parameter* p : t.model().parameters()) {
        const std::vector<float> w = p->value.to_host();
        r.weights.insert(r.weights.end(), w.begin(), w.end());
      }
      const cuda::StepGraph::Counts after = cuda::StepGraph::counts();
      r.graphs = {after.launched - before.launched, after.instantiated - before.instantiated};
      return r;
    };
    const Run op_by_op = run(false, true);
    EXPECT_EQ(op_by_op.graphs.launched, 0);
    for (const bool read_each : {false, true}) {
      if (read_each && &k != &cases[0]) break;
      SCOPED_TRACE(read_each ? "each step read as it ends" : "every step read at the end");
      const Run graphs = run(true, read_each);
      EXPECT_EQ(graphs.graphs.launched, c.steps - Trainer::kStepsBeforeGraphs);
      // The steady steps have one shape: at most one executable graph, updated for every later
      // step. The backend (one per device) keeps it across trainers: a second run of the same
      // shape makes none.
      EXPECT_LE(graphs.graphs.instantiated, read_each ? 0 : 1) << "graphs made";
      EXPECT_TRUE(test::same_floats(graphs.losses, op_by_op.losses));
      EXPECT_TRUE(test::same_floats(graphs.norms, op_by_op.norms));
      EXPECT_TRUE(test::same_floats(graphs.weights, op_by_op.weights));
    }
  }
}

// Issue 34 (finding 3): Linear hands cuBLASLt its FP8 operands K-major, as TE does: x and dy
// cast and transposed in one kernel, the weight's codes transposed once per cast. So at the
// demo's sizes (multiples of 16) a step asks the backend to transpose or pad no operand, with
// or without kept weight casts (micro-batches, --fp8-weights); before, every dgrad and wgrad
// did (three copies per Linear per micro-batch).
TEST(CudaTraining, Fp8StepsHandGemmsOperandsAsTheyTakeThem) {
  FP8LM_REQUIRE_CUDA_FP8();
  for (const Variant& v : kVariants) {
    if (v.precision != Precision::Fp8) continue;
    for (const int64_t micro_batches : {1, 2}) {
      SCOPED_TRACE(std::string(v.name) + ", micro-batches " + std::to_string(micro_batches));
      TrainConfig c = variant(v, DeviceSpec::Cuda);
      c.evaluate = false;
      c.grad_accum = micro_batches;
      Trainer gpu(c);
      gpu.train_step();
      const int64_t before = cuda::fp8_operand_copies();
      gpu.train_step();
      EXPECT_EQ(cuda::fp8_operand_copies() - before, 0);
    }
  }
}

// Issue 34 (finding 3, Float8BlockScaling): where the device multiplies block-scaled codes,
// Linear hands them over as cuBLASLt reads them, as TE does: x's and dy's column-wise casts
// write their codes transposed (K-major for wgrad), the 2D weight's codes are transposed once
// per weight version for dgrad, and no cast writes a BF16 operand. So every GEMM of a steady
// step is the native one and none asks for an operand copy, with micro-batches and
// --fp8-weights; and the Linears hold no BF16 operand.
TEST(CudaTraining, BlockScaledStepsHandGemmsCodesAsTheyTakeThem) {
  FP8LM_REQUIRE_CUDA();
  if (!cuda::block_scaled_gemm_available()) GTEST_SKIP() << "no block-scaled GEMM on this device";
  struct Case {
    bool fp8_weights;
    int64_t micro_batches;
  };
  for (const Case& k : {Case{false, 2}, Case{true, 1}}) {
    SCOPED_TRACE(std::string(k.fp8_weights ? "fp8 weights, " : "") + "micro-batches " +
                 std::to_string(k.micro_batches));
    TrainConfig c = demo(Precision::Fp8, DeviceSpec::Cuda);
    c.recipe.kind = ScalingKind::Block;
    c.evaluate = false;
    c.batch_size = 8;  // 128 tokens: fewer than most weights' rows, so x's codes are the smaller
    c.grad_accum = k.micro_batches;
    c.fp8_weights = k.fp8_weights;
    Trainer gpu(c);
    gpu.train_step();
    const int64_t copies = cuda::fp8_operand_copies(), native = cuda::block_scaled_gemms_run();
    gpu.train_step();
    EXPECT_EQ(cuda::fp8_operand_copies() - copies, 0);
    const auto gemms = static_cast<int64_t>(3 * gpu.model().linears().size()) * k.micro_batches;
    EXPECT_EQ(cuda::block_scaled_gemms_run() - native, gemms);
    for (Linear* l : gpu.model().linears()) {
      // Saved for wgrad: x's column-wise codes (1 byte a value) and their scales, no operand.
      const auto operand_bytes =
          static_cast<size_t>(c.batch_size * c.model.seq_len * l->in_features()) * sizeof(bf16_t);
      EXPECT_LT(l->memory_use().saved, operand_bytes) << l->name();
    }
  }
}

// Issue 34: a profiled step's device time by kind of op (kernels/op_times.h, what
// bench_train reports on a GPU): GEMMs, casts, attention and the optimizer all appear, each op
// once per entry point, and the kinds' times add up to no more than the step's wall time (the
// backend's work runs in order on one stream).
TEST(CudaTraining, AProfiledStepIsSplitByKindOfOp) {
  FP8LM_REQUIRE_CUDA_FP8();
  TrainConfig c = demo(Precision::Fp8, DeviceSpec::Cuda);
  c.evaluate = false;
  Trainer gpu(c);
  gpu.train_step();
  profile_ops(true);
  const StepStats s = gpu.train_step();
  const OpTimes t = take_op_times();
  profile_ops(false);
  double busy = 0;
  for (const OpKind k : {OpKind::Gemm, OpKind::Cast, OpKind::Attention, OpKind::Norm, OpKind::Loss,
                         OpKind::Optimizer}) {
    const auto i = static_cast<size_t>(k);
    EXPECT_GT(t.ops[i], 0) << op_kind_name(k);
    EXPECT_GT(t.seconds[i], 0.0) << op_kind_name(k);
  }
  for (const double x : t.seconds) busy += x;
  EXPECT_LE(busy, s.step_seconds);
  // Profiling off: nothing more is recorded.
  gpu.train_step();
  const OpTimes none = take_op_times();
  for (const int64_t n : none.ops) EXPECT_EQ(n, 0);
}

// Issue 14: the block-scaled recipes run on the GPU with the same casts as the CPU (its block
// casts are bit for bit the CPU's: test_cuda_block_cast), so the first step agrees as the
// per-tensor recipes' does, and a run is deterministic (NVFP4's stochastic rounding included:
// its draws follow the element's place). Their GEMMs are BF16 GEMMs of the decoded operands,
// NVFP4's tensor scales applied to the product: any GPU with BF16 (cc 8.0) runs them; on Hopper
// (and the emulator's device) Float8BlockScaling's every GEMM is cuBLASLt's block-scaled one
// instead, and the recipe's line says so.
TEST(CudaTraining, BlockScaledRecipesMatchTheCpuAndAreDeterministic) {
  FP8LM_REQUIRE_CUDA();
  if (test::cuda_cc() < 80) GTEST_SKIP() << "BF16 GEMMs need compute capability 8.0";
  for (const ScalingKind kind : {ScalingKind::Mxfp8, ScalingKind::Block, ScalingKind::Nvfp4}) {
    SCOPED_TRACE(std::string(scaling_kind_name(kind)));
    TrainConfig c = demo(Precision::Fp8, DeviceSpec::Cpu);
    c.recipe.kind = kind;
    c.steps = 3;
    c.evaluate = false;
    TrainConfig g = c;
    g.device = {DeviceSpec::Cuda, 0};
    Trainer cpu(c), gpu(g);
    const int64_t native_before = cuda::block_scaled_gemms_run();
    const StepStats a = cpu.train_step(), b = gpu.train_step();
    const bool native = kind == ScalingKind::Block && cuda::block_scaled_gemm_available();
    // Each Linear's three GEMMs: fprop, dgrad and wgrad.
    const auto gemms = static_cast<int64_t>(3 * gpu.model().linears().size());
    EXPECT_EQ(cuda::block_scaled_gemms_run() - native_before, native ? gemms : 0);
    EXPECT_EQ(gpu.recipe_line().find("native") != std::string::npos, native) << gpu.recipe_line();
    // As FirstStepMatchesTheCpu: attention's BF16 on the GPU moves a value across a rounding
    // boundary now and then.
    EXPECT_NEAR(a.loss, b.loss, 2e-3f * std::fabs(a.loss));
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 0.04f * a.grad_norm);
    EXPECT_EQ(train(g).losses, train(g).losses);
  }
}

TEST(CudaTraining, RunsAreDeterministic) {
  FP8LM_REQUIRE_CUDA();
  for (const Variant& v : kVariants) {
    if (v.precision == Precision::Fp8 && test::cuda_cc() < 89) continue;
    TrainConfig c = variant(v, DeviceSpec::Cuda);
    c.steps = 6;
    c.evaluate = false;
    EXPECT_EQ(train(c).losses, train(c).losses) << v.name;
  }
}

TEST(CudaTraining, StopAndResumeEqualsUninterruptedBitForBit) {
  FP8LM_REQUIRE_CUDA();
  for (const Variant& v : kVariants) {
    if (v.precision == Precision::Fp8 && test::cuda_cc() < 89) continue;
    TrainConfig c = variant(v, DeviceSpec::Cuda);
    c.steps = 12;
    c.evaluate = false;
    Trainer straight(c);
    TrainResult r_straight;
    const RunSchedule every4{.val_every = 4};
    ASSERT_EQ(test::train_in_dir(straight, test::fresh_dir(std::string(v.name) + "_a"), every4,
                                 &r_straight),
              RunEnd::Finished);
    const std::string dir = test::fresh_dir(std::string(v.name) + "_b");
    {
      Trainer first(c);
      // Stops after a validation step: evaluating changes nothing.
      ASSERT_EQ(test::train_in_dir(first, dir, {.stop_after = 8, .val_every = 4}), RunEnd::Stopped);
    }
    std::unique_ptr<Trainer> resumed = resume_trainer(latest_checkpoint(dir));
    resumed->use_device({DeviceSpec::Cuda, 0});
    TrainResult r_resumed;
    ASSERT_EQ(test::train_in_dir(*resumed, dir, every4, &r_resumed), RunEnd::Finished);
    EXPECT_EQ(r_resumed.losses, r_straight.losses) << v.name;
    const ParameterList pa = straight.model().parameters(), pb = resumed->model().parameters();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i]->values(), pb[i]->values()) << v.name;
  }
}

// A run checkpointed on one backend continues on the other: the weights, moments and FP8
// state arrive unchanged, and the next step's loss agrees with the first backend's next step.
TEST(CudaTraining, CheckpointsMoveBetweenBackends) {
  FP8LM_REQUIRE_CUDA();
  for (const Variant& v : kVariants) {
    if (v.precision == Precision::Fp8 && test::cuda_cc() < 89) continue;
    for (const bool from_gpu : {true, false}) {
      SCOPED_TRACE(from_gpu ? "gpu -> cpu" : "cpu -> gpu");
      const DeviceSpec::Kind src = from_gpu ? DeviceSpec::Cuda : DeviceSpec::Cpu;
      const DeviceSpec::Kind dst = from_gpu ? DeviceSpec::Cpu : DeviceSpec::Cuda;
      TrainConfig c = variant(v, src);
      c.steps = 8;
      c.evaluate = false;
      const std::string dir = test::fresh_dir(std::string(v.name) + (from_gpu ? "_g2c" : "_c2g"));
      Trainer first(c);
      ASSERT_EQ(test::train_in_dir(first, dir, {.stop_after = 4}), RunEnd::Stopped);
      std::unique_ptr<Trainer> moved = resume_trainer(latest_checkpoint(dir));
      moved->use_device({dst, 0});
      const ParameterList pa = first.model().parameters(), pb = moved->model().parameters();
      for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i]->values(), pb[i]->values()) << v.name;
      const auto ma = first.model().fp8_state(), mb = moved->model().fp8_state();
      for (size_t i = 0; i < ma.size(); ++i) {
        EXPECT_EQ(ma[i][Slot::Weight].scale, mb[i][Slot::Weight].scale) << v.name;
        EXPECT_EQ(ma[i][Slot::Input].amax_history, mb[i][Slot::Input].amax_history);
      }
      const StepStats a = first.train_step(), b = moved->train_step();
      EXPECT_EQ(a.step, b.step);
      // Across backends: as FirstStepMatchesTheCpu.
      const float tol = 2e-3f;
      EXPECT_NEAR(a.loss, b.loss, tol * std::fabs(a.loss)) << v.name;
    }
  }
}

TEST(CudaTraining, GenerationAgreesWithTheCpu) {
  FP8LM_REQUIRE_CUDA();
  TrainConfig c = demo(Precision::Fp32, DeviceSpec::Cuda);
  c.evaluate = false;
  std::unique_ptr<GPT> model;
  train(c, {}, &model);
  const std::vector<int32_t> prompts = {3, 5, 7, 9, 1, 2, 3, 4};
  const std::vector<int32_t> on_cpu = model->generate(prompts.data(), 2, 4, 8);
  InferenceModel gpu(*model, c, {DeviceSpec::Cuda, 0});
  // A trained model's greedy choices have clear margins, far above FP32 summation-order noise.
  EXPECT_EQ(gpu.generate(prompts.data(), 2, 4, 8), on_cpu);
  InferenceModel cpu(*model, c, {DeviceSpec::Cpu, 0});
  const auto batches = stride_held_out_batches(c, 2);
  // BF16 attention on the GPU against FP32 on the CPU: about 1e-3 relative.
  const double want = mean_loss(cpu.model(), batches);
  EXPECT_NEAR(mean_loss(gpu.model(), batches), want, 2e-3 * want + 1e-4);
}

// FP8 GEMMs take rows in multiples of 16: generation (one sequence growing a token at a time)
// and evaluation of odd batches pad the batch with dummy sequences that change nothing.
TEST(CudaTraining, Fp8GenerationAndLossPadOddBatches) {
  FP8LM_REQUIRE_CUDA_FP8();
  TrainConfig c = demo(Precision::Fp8, DeviceSpec::Cuda);
  c.evaluate = false;
  std::unique_ptr<GPT> model;
  train(c, {}, &model);
  InferenceModel gpu(*model, c, {DeviceSpec::Cuda, 0});
  const std::vector<int32_t> prompt = {3, 5, 7, 9};  // the demo's prompt length
  const std::vector<int32_t> out = gpu.generate(prompt.data(), 1, 4, 8);  // rows 4, 5, ... 11
  ASSERT_EQ(out.size(), 8u);
  // The demo learned the stride: 11, 13, 15, ... (mod 32).
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], int32_t(11 + 2 * i) % 32) << i;
  Batch odd = stride_held_out_batches(c, 1)[0];
  odd.B = 1, odd.T = 11;  // 11 rows
  odd.tokens.resize(11), odd.targets.resize(11);
  const double l_odd = mean_loss(gpu.model(), {odd});
  EXPECT_TRUE(std::isfinite(l_odd));
  InferenceModel cpu(*model, c, {DeviceSpec::Cpu, 0});
  // FP8 on both sides, BF16 attention on the GPU: agreement to a few 1e-3.
  EXPECT_NEAR(l_odd, mean_loss(cpu.model(), {odd}), 0.01 * l_odd + 1e-3);
}

}  // namespace
}  // namespace fp8lm
