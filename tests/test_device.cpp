// --device: parsing, and what auto and an explicit cuda request do on a machine without a GPU
// (the GPU side runs in test_cuda_training on a machine with one).
#include <gtest/gtest.h>

#include "fp8lm/error.h"
#include "kernels/cuda/device_query.h"
#include "kernels/device.h"
#include "train/trainer.h"

namespace fp8lm {
namespace {

bool gpu_present() {
  return !cuda::query_devices().devices.empty();
}

TEST(Device, ParsesEverySpelling) {
  EXPECT_EQ(parse_device("auto").kind, DeviceSpec::Auto);
  EXPECT_EQ(parse_device("cpu").kind, DeviceSpec::Cpu);
  const DeviceSpec c = parse_device("cuda");
  EXPECT_EQ(c.kind, DeviceSpec::Cuda);
  EXPECT_EQ(c.index, 0);
  const DeviceSpec c3 = parse_device("cuda:3");
  EXPECT_EQ(c3.kind, DeviceSpec::Cuda);
  EXPECT_EQ(c3.index, 3);
}

// Under mpirun (issue 13) a rank whose --device names no GPU (auto, cuda) takes its local
// rank's, modulo the GPUs it sees; cuda:N and cpu stay as asked.
TEST(Device, EachLocalRankTakesItsOwnGpuUnlessOneIsNamed) {
  for (const char* any : {"auto", "cuda"}) {
    for (int local = 0; local < 5; ++local) {
      EXPECT_EQ(gpu_of_local_rank(parse_device(any), local, 2).index, local % 2) << any;
      EXPECT_EQ(gpu_of_local_rank(parse_device(any), local, 8).index, local) << any;
    }
    EXPECT_EQ(gpu_of_local_rank(parse_device(any), 3, 0).index, 0) << "no GPU: as asked";
  }
  EXPECT_EQ(gpu_of_local_rank(parse_device("cuda:1"), 0, 4).index, 1);
  EXPECT_EQ(gpu_of_local_rank(parse_device("cuda:0"), 3, 4).index, 0);
  EXPECT_EQ(gpu_of_local_rank(parse_device("cpu"), 3, 4).kind, DeviceSpec::Cpu);
}

TEST(Device, RejectsAnythingElseNamingTheFlag) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CPU", ""}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device"), std::string::npos) << e.what();
    }
  }
}

TEST(Device, CpuIsAlwaysTheCpu) {
  const DeviceChoice d = resolve_device({DeviceSpec::Cpu, 0});
  EXPECT_FALSE(d.cuda);
  EXPECT_EQ(d.label(), "cpu");
}

// Without a GPU, auto takes the CPU; it gives a reason ("no NVIDIA GPU found") only where a
// driver is present, since a machine without one expects none.
TEST(Device, AutoFallsBackToTheCpuWithAReasonWhereADriverIsPresent) {
  if (gpu_present()) GTEST_SKIP() << "a CUDA device is present";
  const DeviceChoice d = resolve_device({DeviceSpec::Auto, 0});
  EXPECT_FALSE(d.cuda);
  if (cuda::query_devices().driver) {
    EXPECT_EQ(d.reason, "no NVIDIA GPU found");
  } else {
    EXPECT_EQ(d.reason, "");
  }
}

TEST(Device, ExplicitCudaWithoutAGpuIsAnErrorNotAFallback) {
  if (gpu_present()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(resolve_device({DeviceSpec::Cuda, 0}), Error);
  TrainConfig c;
  c.model = {.vocab = 16, .seq_len = 8, .d_model = 16, .n_layers = 1, .n_heads = 2, .ffn = 32};
  c.device = {DeviceSpec::Cuda, 0};
  EXPECT_THROW(Trainer t(c), Error);
}

TEST(Device, AnIndexPastTheLastGpuIsAnError) {
  EXPECT_THROW(resolve_device({DeviceSpec::Cuda, 1000}), Error);
}

}  // namespace
}  // namespace fp8lm
