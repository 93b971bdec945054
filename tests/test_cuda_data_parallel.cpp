// Data parallelism on GPUs (issue 13): every rank trains on its GPU and the gradients are
// all-reduced by NCCL in GPU memory, in buckets started during backward. Run under `mpirun -np
// 2`: scripts/cuda-emu-tests runs it so under the emulator, whose NCCL stand-in carries the
// collectives over MPI and gives each process a GPU of its own; on a machine with one GPU per
// rank the same command runs it on the GPUs. Alone, or without a GPU, it skips.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
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

// Issue 34 (finding 1): a rank unwound by an error while its collectives are in flight (here
// an all-reduce its peer has not joined yet) aborts its communicator rather than finalizing
// it, which waits for a peer that may never come. The emulator's stand-in keeps a collective
// in flight until its peer joins, as NCCL does: rank 1 joins only after rank 0 has dropped its
// communicator, so a finalize there would hang both ranks. Rank 1's late all-reduce then ends
// with rank 0's abandoned one (MPI carries it on), and its sum is both ranks' values.
TEST_F(CudaDataParallel, AnErrorWithAnAllReduceInFlightAbortsTheCommunicator) {
  const int rank = world().rank();
  const size_t n = 64;
  std::unique_ptr<DeviceCollectives> nccl = make_device_collectives(world(), 0);
  DeviceBuffer<float> x = to_device(std::vector<float>(n, 1.0f + static_cast<float>(rank)));
  float here[] = {1.0f};
  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      const std::unique_ptr<DeviceCollectives> unwound = std::move(nccl);
      unwound->start_all_reduce_sum(x.data(), n, "in-flight all-reduce");
      throw Error("a failure while the all-reduce is in flight");
    } catch (const Error&) {
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              10.0);
  }
  world().all_reduce_max(here, "rank 0 has dropped its communicator");
  if (rank == 1) {
    nccl->start_all_reduce_sum(x.data(), n, "the late all-reduce");
    nccl->wait_all();
    EXPECT_EQ(to_host(x.data(), n), std::vector<float>(n, 3.0f));
    nccl.reset();  // nothing in flight: finalized
  }
  world().all_reduce_max(here, "the test's end");
}

}  // namespace
}  // namespace fp8lm
