// Data parallelism on GPUs (issue 13): every rank trains on its GPU and the gradients are
// all-reduced by NCCL in GPU memory, in buckets started during backward. Run under `mpirun -np
// 2`: scripts/cuda-emu-tests runs it so under the emulator, whose NCCL stand-in carries the
// collectives over MPI and gives each process a GPU of its own; on a machine with one GPU per
// rank the same command runs it on the GPUs. Alone, or without a GPU, it skips.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "rank_check.h"
#include "train/trainer.h"

namespace fp8lm {
namespace {

TrainConfig tiny_on_gpu() {
  TrainConfig c;
  c.model = {.vocab = 32, .seq_len = 16, .d_model = 64, .n_layers = 2, .n_heads = 4, .ffn = 128};
  c.precision = Precision::Fp32;
  c.device = {DeviceSpec::Cuda, 0, /*any_gpu=*/true};
  c.steps = 3;
  c.batch_size = 8;
  c.warmup = 1;
  c.evaluate = false;
  return c;
}

using test::all_weights;

bool same_on_every_rank(const std::vector<float>& mine) {
  return test::same_on_every_rank(world(), mine);
}

class CudaDataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    FP8LM_REQUIRE_CUDA();
    if (world().size() == 1) GTEST_SKIP() << "one process: run under mpirun -np 2";
    if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
  }
};

// FP32 on the GPUs, gradients summed by NCCL in buckets of 10 KiB (several per layer, started
// as backward finishes them): the same sequences as one process on one GPU, the gradients
// summed in another order, so the losses agree within a few FP32 roundings (1e-6 relative, as
// on the CPU ranks), the step's bytes are the gradients' (they travelled by NCCL, not through
// the host), and every rank holds the same weights bit for bit.
TEST_F(CudaDataParallel, NcclRanksReproduceOneProcess) {
  TrainConfig c = tiny_on_gpu();
  c.grad_bucket_mb = 0.01f;
  Trainer one(c, single_process()), many(c);
  EXPECT_NE(many.collectives().find("nccl"), std::string::npos) << many.collectives();
  const auto gradient_bytes = static_cast<double>(c.model.parameter_count() * sizeof(float));
  for (int64_t step = 1; step <= c.steps; ++step) {
    const StepStats a = one.train_step(), b = many.train_step();
    EXPECT_NEAR(b.loss, a.loss, 1e-6 * std::fabs(a.loss)) << "step " << step;
    EXPECT_GE(static_cast<double>(b.comm_bytes), gradient_bytes) << "step " << step;
    ASSERT_TRUE(same_on_every_rank(all_weights(many))) << "step " << step;
  }
}

// --grad-reduce bf16 on the GPUs: the buckets are rounded to BF16 on the GPU and summed by
// NCCL in BF16 (expect_bf16_reduction_tracks_fp32's tolerances).
TEST_F(CudaDataParallel, Bf16GradientsReduceOnTheGpus) {
  test::expect_bf16_reduction_tracks_fp32(tiny_on_gpu());
}

}  // namespace
}  // namespace fp8lm
