// The fp8lm command as a user runs it: output formats, stdin, JSON, and one-line errors with
// a non-zero exit for bad input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "cli_util.h"
#include "core/fp8_dtype.h"
#include "io/safetensors.h"
#include "kernels/cuda/device_query.h"
#include "safetensors_edit.h"

namespace fp8lm {
namespace {

TEST(Cli, TableListsAll256CodesWithBitsAndValues) {
  for (DType f : {DType::E4M3, DType::E5M2}) {
    const CliResult r = fp8lm("fp8 table --format " + std::string(dtype_short_name(f)));
    ASSERT_EQ(r.status, 0) << r.err;
    const auto ls = lines(r.out);
    ASSERT_EQ(ls.size(), 256u);
    for (int c = 0; c < 256; ++c) {
      std::istringstream row(ls[c]);
      std::string code, bits, value;
      row >> code >> bits >> value;
      EXPECT_EQ(std::stoi(code, nullptr, 16), c) << ls[c];
      EXPECT_EQ(bits.size(), 10u) << ls[c];  // s.eeee.mmm / s.eeeee.mm
      const float want = fp8_decode(static_cast<uint8_t>(c), f);
      const float got = std::strtof(value.c_str(), nullptr);  // reads back exactly
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << ls[c];
      } else {
        EXPECT_EQ(got, want) << ls[c];
      }
    }
  }
  EXPECT_EQ(lines(fp8lm("fp8 table --format e4m3").out)[0x7e], "0x7e 0.1111.110 448");
  EXPECT_EQ(lines(fp8lm("fp8 table --format e5m2").out)[0x7c], "0x7c 0.11111.00 inf");
}

TEST(Cli, EncodeRoundsSaturatesAndReadsStdin) {
  CliResult r = fp8lm("fp8 encode --format e4m3 1 -1.5 464 465 -inf nan 0.001");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out),
            (std::vector<std::string>{"1 0x38 1", "-1.5 0xbc -1.5", "464 0x7e 448", "465 0x7e 448",
                                      "-inf 0xfe -448", "nan 0x7f nan", "0.001 0x01 0.001953125"}));
  r = fp8lm("fp8 encode --format e5m2 --no-saturate 61440 -1e9");
  EXPECT_EQ(lines(r.out), (std::vector<std::string>{"61440 0x7c inf", "-1000000000 0xfc -inf"}));
  r = fp8lm("fp8 encode --format e4m3 --scale 4", "0.25\n 125 \n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out), (std::vector<std::string>{
                              "0.25 0x38 0.25", "125 0x7e 112"}));  // 500 saturates to 448, then /4
}

TEST(Cli, EncodeJsonParses) {
  const CliResult r = fp8lm("fp8 encode --format e4m3 --json 0.1 inf");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["code"], "0x1d");
  EXPECT_EQ(j[0]["input"].get<float>(), 0.1f);
  EXPECT_EQ(j[0]["value"].get<float>(), 0.1015625f);
  EXPECT_EQ(j[1]["input"], "inf");
  EXPECT_EQ(j[1]["code"], "0x7e");
}

TEST(Cli, DecodeAcceptsHexAndDecimal) {
  const CliResult r = fp8lm("fp8 decode --format e5m2 0x7b 124 0X01");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out),
            (std::vector<std::string>{"0x7b 57344", "0x7c inf", "0x01 1.5258789e-05"}));
}

// The block formats (issue 14): E2M1's 16 codes and E8M0's 256 in the table, each value read
// back exactly; encode rounds E2M1 to nearest even and saturates, and E8M0 (a scale) rounds up.
TEST(Cli, TheBlockFormatsHaveTablesAndCodecs) {
  CliResult r = fp8lm("fp8 table --format e2m1");
  ASSERT_EQ(r.status, 0) << r.err;
  auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 16u);
  EXPECT_EQ(ls[0x7], "0x7 0.11.1 6");
  EXPECT_EQ(ls[0x9], "0x9 1.00.1 -0.5");
  r = fp8lm("fp8 table --format e8m0");
  ls = lines(r.out);
  ASSERT_EQ(ls.size(), 256u);
  EXPECT_EQ(ls[0x7f], "0x7f 01111111 1");
  EXPECT_EQ(ls[0xff], "0xff 11111111 nan");
  for (int c = 0; c < 255; ++c)
    EXPECT_EQ(std::strtof(ls[static_cast<size_t>(c)].substr(14).c_str(), nullptr),
              std::ldexp(1.0f, c - 127))
        << ls[static_cast<size_t>(c)];
  r = fp8lm("fp8 encode --format e2m1 0.25 0.75 2.5 5 7 -100 0.1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out),
            (std::vector<std::string>{"0.25 0x0 0", "0.75 0x2 1", "2.5 0x4 2", "5 0x6 4", "7 0x7 6",
                                      "-100 0xf -6", "0.1 0x0 0"}));
  r = fp8lm("fp8 encode --format e8m0 1 3 0.1 0");
  EXPECT_EQ(lines(r.out), (std::vector<std::string>{"1 0x7f 1", "3 0x81 4", "0.1 0x7c 0.125",
                                                    "0 0x00 5.877472e-39"}));
  r = fp8lm("fp8 decode --format e2m1 0xf 3");
  EXPECT_EQ(lines(r.out), (std::vector<std::string>{"0xf -6", "0x3 1.5"}));
}

// --block: the values as one block. MXFP8: the E8M0 scale is the amax over 448 rounded up to a
// power of two (1000 / 448 -> 4), each value divided by it before the cast. NVFP4: the E4M3
// block scale of a block that is the whole tensor is 448 (the global scale maps its amax to
// 448 x 6), and each value's code is its E2M1 rounding after both scales.
TEST(Cli, BlockQuantizesAsMxfp8AndNvfp4Do) {
  CliResult r = fp8lm("fp8 encode --format e4m3 --block 1 2 1000 -0.001");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out),
            (std::vector<std::string>{"block scale 0x81 (e8m0) = 4 · amax 1000", "1 0x28 1",
                                      "2 0x30 2", "1000 0x78 1024", "-0.001 0x80 -0"}));
  r = fp8lm("fp8 encode --format e2m1 --block --json 6 1 -3 0.1");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["block"]["recipe"], "nvfp4");
  EXPECT_EQ(j["block"]["e4m3"], "0x7e");
  EXPECT_EQ(j["block"]["global_encode_scale"].get<float>(), 448.0f);
  std::vector<std::string> codes;
  for (const auto& v : j["values"]) codes.push_back(v["code"]);
  EXPECT_EQ(codes, (std::vector<std::string>{"0x7", "0x2", "0xd", "0x0"}));
  // Decoded back: within the two scales' roundings of the element (1/448 is not exact in FP32).
  EXPECT_NEAR(j["values"][2]["value"].get<float>(), -3.0f, 3e-6f);
}

TEST(Cli, BadInputIsOneLineErrorAndNonZeroExit) {
  const char* bad[] = {
      "fp8 table --format e3m4",
      "fp8 table",
      "fp8 encode --format e4m3 abc",
      "fp8 encode --format e4m3 1.5x",
      "fp8 encode --format e4m3 --scale nan 1",
      "fp8 encode --format e4m3 --scale 0 1",
      "fp8 encode --format e4m3 --scale -2 1",
      "fp8 encode --format e4m3 --scale inf 1",
      "fp8 encode --format e4m3 --bogus 1",
      "fp8 decode --format e4m3 0x100",
      "fp8 decode --format e4m3 -1",
      "fp8 decode --format e4m3 0xzz",
      "fp8 decode --format e2m1 0x10",
      "fp8 encode --format e8m0 --scale 2 1",
      "fp8 encode --format e2m1 --no-saturate 1",
      "fp8 encode --format e8m0 --block 1",
      "fp8 encode --format e4m3 --block --scale 2 1",
      "fp8 frobnicate",
      "frobnicate",
      "doctor --verbose",
      "train --device gpu --steps 1",
      "train --device cuda:x --steps 1",
      "generate --checkpoint nothing.safetensors --prompt 1 --device tpu",
      "",
  };
  for (const char* args : bad) {
    const CliResult r = fp8lm(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err).size(), 1u) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args << " printed: " << r.out;
  }
}

TEST(Cli, DeviceCudaWithoutAGpuIsAnErrorNotAFallback) {
  if (!cuda::query_devices().devices.empty()) GTEST_SKIP() << "a CUDA device is present";
  const CliResult r = fp8lm("train --device cuda --steps 1 --threads 2");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err.rfind("error: --device cuda", 0), 0u) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  // auto trains on the CPU; it says it found no GPU only where an NVIDIA driver is present
  // (a machine without one expects no GPU, and every CPU run saying so is noise).
  const CliResult a = fp8lm(
      "train --device auto --steps 1 --threads 2 --vocab 16 --seq-len 12 "
      "--d-model 16 --n-layers 1 --n-heads 2 --ffn 32 --no-save");
  EXPECT_EQ(a.status, 0) << a.err;
  EXPECT_NE(a.out.find(" on cpu ("), std::string::npos) << a.out;
  if (cuda::query_devices().driver) {
    EXPECT_NE(a.out.find("device cpu: no NVIDIA GPU found"), std::string::npos) << a.out;
  } else {
    EXPECT_EQ(a.out.find("device cpu"), std::string::npos) << a.out;
  }
}

TEST(Cli, TrainWritesSummaryJson) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_run";
  std::filesystem::remove_all(dir);
  const CliResult r = fp8lm(
      "train --precision fp8 --fp8-format e4m3 --amax-history-len 4 --steps 3 --vocab 16 "
      "--seq-len 12 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 "
      "--threads 2 --device cpu --out " +
      dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("stride accuracy"), std::string::npos) << r.out;
  std::ifstream in(dir + "/summary.json");
  ASSERT_TRUE(in.good());
  const auto j = nlohmann::json::parse(in);
  for (const char* key : {"precision", "precision_reason", "recipe", "steps", "seconds",
                          "tokens_per_s", "final_loss", "stride_accuracy"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["precision"], "fp8 (emulated)");
  EXPECT_EQ(j["steps"], 3);
}

// The issue's case: a learning rate that blows the weights up. The steps turn non-finite, are
// skipped (the weights stay finite), and after 10 in a row the run stops: one error line, a
// non-zero exit, and no model file.
TEST(Cli, TrainingThatTurnsNonFiniteStopsAndWritesNoModel) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_blowup";
  std::filesystem::remove_all(dir);
  const CliResult r = fp8lm(
      "train --precision fp32 --lr 1e6 --grad-clip 0 --warmup 0 --steps 40 --vocab 16 "
      "--seq-len 12 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 --threads 2 "
      "--device cpu --out " +
      dir);
  EXPECT_NE(r.status, 0);
  const std::vector<std::string> err = lines(r.err);
  ASSERT_FALSE(err.empty());
  EXPECT_NE(err.back().find("10 steps in a row skipped"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/summary.json"));
  // Every step was recorded; the skipped ones say so.
  std::ifstream metrics(dir + "/metrics.jsonl");
  int skipped = 0;
  for (std::string line; std::getline(metrics, line);)
    skipped += nlohmann::json::parse(line).value("skipped", false);
  EXPECT_EQ(skipped, 10);
}

const std::string kTinyRun = "--steps 3 " + kTinyModel;

// One run, one writer: while a process holds a run's lock, a second `train --resume` stops at
// once with one line and changes nothing.
TEST(Cli, ARunInUseIsRefusedAndLeftAsItWas) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_locked";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(fp8lm(std::string("train ") + kTinyRun + " --checkpoint-every 1 --out " + dir).status,
            0);
  const auto before = files_of(dir);
  const int fd = open((dir + "/.lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);  // as a training process holds it
  const CliResult r = fp8lm("train --resume " + dir);
  close(fd);
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find(dir + " is in use: another fp8lm process"), std::string::npos) << r.err;
  EXPECT_EQ(files_of(dir), before);
}

// Issue 12 (4): when `latest` is missing, names anything outside the run's checkpoints/, or
// names a checkpoint that fails to load (a flipped bit), --resume takes the newest checkpoint
// that loads and says which and why.
TEST(Cli, ResumeFallsBackToTheNewestCheckpointThatLoads) {
  const std::string pristine = testing::TempDir() + "fp8lm_cli_fallback";
  std::filesystem::remove_all(pristine);
  ASSERT_EQ(
      fp8lm(std::string("train ") + kTinyRun + " --checkpoint-every 1 --out " + pristine).status,
      0);
  const auto set_latest = [](const std::string& dir, const std::string& text) {
    std::ofstream(dir + "/checkpoints/latest") << text;
  };
  const auto flip_a_bit = [](const std::string& path) {
    std::vector<uint8_t> bytes = test::read_bytes(path);
    bytes[test::data_offset(bytes, "lnf.weight")] ^= 1;
    test::write_bytes(path, bytes);
  };
  const struct {
    const char* name;
    std::function<void(const std::string&)> damage;
    const char* why;
    const char* used;
  } cases[] = {
      {"missing", [](const std::string& d) { std::filesystem::remove(d + "/checkpoints/latest"); },
       "checkpoints/latest is missing", "step-000003"},
      {"outside",
       [&](const std::string& d) { set_latest(d, "../../other_run/checkpoints/step-000003\n"); },
       "checkpoints/latest names '../../other_run/checkpoints/step-000003', not one of this "
       "run's checkpoints",
       "step-000003"},
      {"flipped",
       [&](const std::string& d) { flip_a_bit(d + "/checkpoints/step-000003/model.safetensors"); },
       "step-000003 does not load: ", "step-000002"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = pristine + "_" + c.name;
    std::filesystem::remove_all(dir);
    std::filesystem::copy(pristine, dir, std::filesystem::copy_options::recursive);
    c.damage(dir);
    const CliResult r = fp8lm("train --resume " + dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(c.why), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string("using ") + dir + "/checkpoints/" + c.used +
                         " instead, the newest checkpoint that loads"),
              std::string::npos)
        << r.out;
  }
  // No checkpoint loads: one line listing each, exit 1.
  const std::string dir = pristine + "_none";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(pristine, dir, std::filesystem::copy_options::recursive);
  for (const char* step : {"step-000001", "step-000002", "step-000003"})
    flip_a_bit(dir + "/checkpoints/" + step + "/model.safetensors");
  const auto before = run_files(dir);
  const CliResult r = fp8lm("train --resume " + dir);
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("no checkpoint to resume from: step-000003 does not load"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("step-000001 does not load"), std::string::npos) << r.err;
  EXPECT_TRUE(run_files(dir) == before) << "the run's files changed";
}

TEST(Cli, OutRefusesADirectoryThatIsNotARun) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_not_a_run";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/model.safetensors") << "a user's own weights";
  const CliResult r = fp8lm(std::string("train ") + kTinyRun + " --out " + dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not empty and not an fp8lm run"), std::string::npos) << r.err;
  const auto after = files_of(dir);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after.at("model.safetensors"), "a user's own weights");
}

// A run killed before its first checkpoint was whole: config.json, metrics lines and at most
// the checkpoint being written (under its .partial- name, one file of two) are there. It starts
// again from step 0, and the part-written checkpoint is cleared away.
TEST(Cli, ARunStoppedBeforeItsFirstCheckpointStartsAgainFromStepZero) {
  namespace fs = std::filesystem;
  const std::string dir = testing::TempDir() + "fp8lm_cli_restart";
  for (const bool mid_write : {false, true}) {
    SCOPED_TRACE(mid_write ? "killed while writing the first checkpoint" : "killed before it");
    fs::remove_all(dir);
    ASSERT_EQ(fp8lm(std::string("train ") + kTinyRun + " --out " + dir).status, 0);
    for (const char* f : {"model.safetensors", "summary.json", "report.html"})
      fs::remove_all(dir + "/" + f);
    const std::string partial = dir + "/checkpoints/.partial-step-000003";
    fs::remove(dir + "/checkpoints/latest");
    if (mid_write) {
      fs::rename(dir + "/checkpoints/step-000003", partial);
      fs::remove(partial + "/model.safetensors");
    } else {
      fs::remove_all(dir + "/checkpoints");
    }
    const CliResult r = fp8lm("train --resume " + dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("has no checkpoint yet: starting the run again from step 0"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("trained 3 steps"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(partial));
    EXPECT_TRUE(fs::exists(dir + "/checkpoints/step-000003/model.safetensors"));
  }
}

// Byte-level text as the README shows it: no --vocab needed (256 byte values), and config.json
// keeps numbers as written.
TEST(Cli, TextDataNeedsNoVocabAndTheConfigKeepsNumbersAsWritten) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_text";
  std::filesystem::remove_all(dir);
  const std::string data = testing::TempDir() + "fp8lm_cli_text.txt";
  {
    std::ofstream out(data);
    for (int i = 0; i < 200; ++i) out << "the quick brown fox jumps over the lazy dog. ";
  }
  const CliResult r = fp8lm("train --data " + data +
                            " --steps 2 --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 "
                            "--ffn 64 --batch-size 4 --threads 2 --lr 0.002 --device cpu --out " +
                            dir);
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(dir + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("\"vocab\": 256"), std::string::npos) << text;
  EXPECT_NE(text.find("\"lr\": 0.002,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"min_lr_ratio\": 0.1,"), std::string::npos) << text;
  // An explicit --vocab that is too small is still refused.
  const CliResult small = fp8lm("train --data " + data + " --vocab 128 --steps 1");
  EXPECT_EQ(small.status, 1);
  EXPECT_NE(small.err.find("--vocab 128 is too small for byte-level text"), std::string::npos)
      << small.err;
}

// Issue 12, point 6: flags checked before anything runs, each with its own message, and a
// refused train leaves no directory behind.
TEST(Cli, OutOfRangeAndNegativeFlagsAreRefusedByName) {
  const std::string run = testing::TempDir() + "fp8lm_cli_flags_run";
  std::filesystem::remove_all(run);
  ASSERT_EQ(fp8lm(std::string("train ") + kTinyRun + " --out " + run).status, 0);
  const std::string model = run + "/model.safetensors";
  const std::string out = testing::TempDir() + "fp8lm_cli_flags_out";
  std::filesystem::remove_all(out);
  const std::pair<std::string, std::string> cases[] = {
      {"train --amax-history-len 4294967297", "--amax-history-len 4294967297 is out of range"},
      {"train --margin -4294967296", "--margin -4294967296 is out of range"},
      {"train --threads 9999999999", "--threads 9999999999 is out of range"},
      {"train --warmup -1", "--warmup -1 must be 0 or more"},
      {"train --weight-decay -0.1", "--weight-decay -0.1 must be 0 or more"},
      {"train --grad-clip -1", "--grad-clip -1 must be 0 (off) or more"},
      {"train --keep-checkpoints -2", "--keep-checkpoints -2 must be at least 1"},
      {"train --checkpoint-every -5", "--checkpoint-every -5 must be 0"},
      {"train --stop-after -1", "--stop-after -1 is negative"},
      {"train --max-skipped-steps 0", "--max-skipped-steps 0 must be at least 1"},
      {"train --grad-accum -2", "--grad-accum -2 must be positive"},
      {"train --batch-size 4611686018427387904 --grad-accum 4", "is too large"},
      {"train --grad-reduce fp8", "--grad-reduce: 'fp8' is not fp32 or bf16"},
      {"train --grad-bucket-mb -1", "--grad-bucket-mb -1 must be 0 (one bucket) to 1048576"},
      {"train --grad-bucket-mb nan", "--grad-bucket-mb"},
      {"train --recipe fp4",
       "--recipe: unknown recipe 'fp4' (expected delayed, current, block, mxfp8 or nvfp4)"},
      {"train --precision fp8 --recipe mxfp8 --fp8-weights --zero 1",
       "block-scaled FP8 weights are not all-gathered yet; use --zero 0"},
      {"train --precision fp8 --recipe nvfp4 --seq-len 24", "needs --seq-len a multiple of 16"},
      {"train --precision fp8 --recipe nvfp4 --disable-rht maybe",
       "--disable-rht 'maybe' is not true or false"},
      {"train --precision fp8 --recipe block --no-power-2-scale", "emulated only as powers of two"},
      {"train --precision fp8 --amax-epsilon -1", "--amax-epsilon -1 must be finite and 0 or more"},
      {"train --precision fp8 --precision-map layers.9.*",
       "--precision-map: 'layers.9.*' matches no GEMM"},
      {"train --out ''", "--out was given an empty value; give a DIR"},
      {"train --resume ''", "--resume was given an empty value; give a DIR"},
      {"train --resume " + run + " --out " + out, "--out and --resume name the run twice"},
      {"eval --checkpoint " + model + " --batches 0", "--batches 0 must be between 1 and"},
      {"eval --checkpoint " + model + " --batches -3", "--batches -3 must be between 1 and"},
      {"eval --checkpoint " + model + " --batches 99999999999",
       "--batches 99999999999 must be between 1 and"},
      {"inspect " + run + " --last -5", "--last -5 must be 0 or more"},
      {"generate --checkpoint " + model + " --prompt 1 --max-new-tokens 9223372036854775806",
       "exceed the position table"},
      // Issue 12 (6): what is not a file, a data file with no end, a model beyond the memory.
      {"train --data /dev/zero", "--data /dev/zero: is a device, not a file"},
      {"train --data " + run, "is a directory, not a file"},
      {"train --config /dev/zero", "--config /dev/zero: is a device, not a file"},
      {"train --d-model 65536 --n-heads 64 --ffn 262144 --n-layers 64",
       "this model needs about 56003.1 GiB to train (3298602123264 parameters"},
      {"fp8 encode --format e4m3 --scale 1e-40 1",
       "--scale 1e-40: the scale must be a positive normal float"},
  };
  for (const auto& [args, message] : cases) {
    const bool train = args.starts_with("train");
    const CliResult r = fp8lm(args + (train && args.find("--out") == std::string::npos &&
                                              args.find("--resume") == std::string::npos
                                          ? " --out " + out
                                          : ""));
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err).size(), 1u) << args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << args << " left " << out;
  }
}

// Issue 12 (2): the reproducible scale collapse (--margin 100) stops the run without the
// fallback; with it (the default) the run finishes, and the switch, slot and reason are in
// metrics.jsonl, the progress output, the summary, the report and inspect.
TEST(Cli, TheBf16FallbackIsShownEverywhere) {
  const std::string args = "train " + kTinyModel +
                           " --precision fp8 --margin 100 --steps 6 --max-skipped-steps 3 --out ";
  const std::string off = testing::TempDir() + "fp8lm_cli_fallback_off";
  const std::string dir = testing::TempDir() + "fp8lm_cli_bf16_fallback";
  std::filesystem::remove_all(off);
  std::filesystem::remove_all(dir);
  const CliResult stopped = fp8lm(args + off + " --fp8-fallback off");
  EXPECT_EQ(stopped.status, 1);
  EXPECT_NE(stopped.err.find("3 steps in a row skipped"), std::string::npos) << stopped.err;

  const CliResult r = fp8lm(args + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string line = "layers.0.qkv fell back to BF16 (output: non-finite FP8 output)";
  EXPECT_NE(r.err.find("step 2: " + line), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("layers.0.fc2 runs in BF16 since step 2 (output: non-finite FP8 output)"),
            std::string::npos)
      << r.out;
  std::ifstream metrics(dir + "/metrics.jsonl");
  int switched = 0;
  for (std::string l; std::getline(metrics, l);) {
    const nlohmann::json j = nlohmann::json::parse(l);
    if (!j.contains("fp8_fallback")) continue;
    EXPECT_EQ(j["step"], 2);
    switched += static_cast<int>(j["fp8_fallback"].size());
  }
  EXPECT_EQ(switched, 4);  // every GEMM of the one layer
  std::ifstream summary(dir + "/summary.json");
  const nlohmann::json sj = nlohmann::json::parse(summary);
  ASSERT_EQ(sj["fp8_fallbacks"].size(), 4u);
  EXPECT_EQ(sj["fp8_fallbacks"][0]["gemm"], "layers.0.qkv");
  std::ifstream report(dir + "/report.html");
  const std::string html((std::istreambuf_iterator<char>(report)), {});
  EXPECT_NE(html.find("layers.0.proj fell back to BF16</b> at step 2"), std::string::npos);
  const CliResult inspect = fp8lm("inspect " + dir);
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("layers.0.fc1 fell back to BF16 at step 2 (output: non-finite FP8 "
                             "output)"),
            std::string::npos)
      << inspect.out;
}

// Every line of a run's metrics.jsonl parses, and their steps are 1, 2, ... in order.
void expect_whole_metrics(const std::string& dir, int64_t last_step) {
  std::ifstream in(dir + "/metrics.jsonl");
  int64_t step = 0;
  for (std::string l; std::getline(in, l);) {
    const nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "a torn line: " << l;
    EXPECT_EQ(j["step"].get<int64_t>(), ++step);
  }
  if (last_step >= 0) {
    EXPECT_EQ(step, last_step);
  }
}

// Issue 12 (5): SIGKILL while metrics are being written (a tiny model writes a line every
// millisecond or so) leaves only whole lines; the resumed run drops the lines after its
// checkpoint and ends with every step exactly once.
TEST(Cli, AKillWhileWritingMetricsLeavesWholeLinesAndResumes) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_kill_metrics";
  for (const char* delay : {"0.2", "0.4"}) {
    SCOPED_TRACE(delay);
    std::filesystem::remove_all(dir);
    const CliResult killed =
        fp8lm(std::string("--version >/dev/null; ") + FP8LM_BIN +
              " train --precision fp32 --steps 3000 --checkpoint-every 7 --vocab 16 --seq-len 12 "
              "--d-model 16 --n-layers 1 --n-heads 1 --ffn 16 --batch-size 1 --threads 1 "
              "--device cpu --out " +
              dir + " >/dev/null 2>&1 & p=$!; " +
              // The delay counts from the first checkpoint (step 7's, before step 8's line), so
              // that a loaded machine's slow start still leaves a run to resume.
              "while kill -0 $p 2>/dev/null && [ \"$(cat " + dir +
              "/metrics.jsonl 2>/dev/null | wc -l)\" -lt 8 ]; do sleep 0.02; done; sleep " + delay +
              "; kill -9 $p; wait $p");
    EXPECT_EQ(killed.status, 137) << "killed mid-run";
    expect_whole_metrics(dir, -1);
    const CliResult resumed = fp8lm("train --resume " + dir);
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    expect_whole_metrics(dir, 3000);
  }
}

// Issue 12 (5): a small filesystem that fills up mid-run (a 320 KiB tmpfs holds two checkpoints;
// needs root to mount, skipped otherwise) stops the run with one line and exit 1, leaves whole
// metrics lines, no temporary files, and a `latest` that names a complete checkpoint, from which
// the run resumes once there is space.
TEST(Cli, AFilesystemThatFillsMidRunStopsItLoudly) {
  const std::string mnt = testing::TempDir() + "fp8lm_cli_tmpfs";
  std::filesystem::create_directories(mnt);
  if (getuid() != 0 ||
      std::system(("mount -t tmpfs -o size=320k tmpfs " + mnt + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "mounting a tmpfs needs root";
  struct Unmount {  // however the test ends
    std::string at;
    ~Unmount() { (void)std::system(("umount " + at + " 2>/dev/null").c_str()); }
  } unmount{mnt};
  const std::string dir = mnt + "/run";
  const CliResult r =
      fp8lm("train --precision fp32 --steps 400 --checkpoint-every 20 --keep-checkpoints 2 " +
            kTinyModel + " --out " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  ASSERT_FALSE(lines(r.err).empty());
  const std::string last = lines(r.err).back();  // after the progress lines, one error line
  EXPECT_EQ(last.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(last.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("error: "), r.err.rfind("error: ")) << r.err;
  expect_whole_metrics(dir, -1);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  // With room again (the run moved off the full filesystem), it resumes and finishes.
  const std::string moved = testing::TempDir() + "fp8lm_cli_tmpfs_run";
  std::filesystem::remove_all(moved);
  std::filesystem::copy(dir, moved, std::filesystem::copy_options::recursive);
  const CliResult resumed = fp8lm("train --resume " + moved);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(resumed.out.find("instead, the newest checkpoint"), std::string::npos)
      << "latest named a complete checkpoint: " << resumed.out;
  expect_whole_metrics(moved, 400);
}

// Issue 12 (6): CLI11 checks required options before unknown ones; the mistyped flag is named.
TEST(Cli, AnUnknownFlagIsNamedEvenWhenARequiredOneIsMissing) {
  for (const auto& [args, command] :
       std::vector<std::pair<std::string, std::string>>{{"fp8 encode --bogus 1", "encode"},
                                                        {"eval --nope 3", "eval"},
                                                        {"generate --x", "generate"}}) {
    const CliResult r = fp8lm(args);
    EXPECT_EQ(r.status, 2) << args;
    const std::string flag =
        args.substr(args.find("--"), args.find(' ', args.find("--")) - args.find("--"));
    EXPECT_EQ(r.err, "error: unknown option '" + flag + "' (see fp8lm " + command + " --help)\n")
        << args;
  }
}

// Peak RSS (KiB) of one shell command run to its end, alone (wait4 on its own process).
long peak_rss_kib(const std::string& command) {
  const std::string line = "exec " + command;
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  return usage.ru_maxrss;
}

// Issue 12 (6): `fp8 encode` takes negative numbers after "--", never prints "-nan", and
// streams: a million values pass through in bounded memory.
TEST(Cli, Fp8EncodeTakesValuesAfterDashesAndStreamsAMillion) {
  const CliResult dashes = fp8lm("fp8 encode --format e4m3 -- -5 2");
  ASSERT_EQ(dashes.status, 0) << dashes.err;
  EXPECT_EQ(dashes.out, "-5 0xca -5\n2 0x40 2\n");
  const CliResult nan = fp8lm("fp8 encode --format e4m3 --no-saturate -- -nan 1e9");
  ASSERT_EQ(nan.status, 0) << nan.err;
  EXPECT_EQ(nan.out.find("-nan"), std::string::npos) << nan.out;

  // Under ASan (the sanitizer build) freed memory sits in its quarantine, so peak RSS says
  // nothing about streaming there: that build checks the output of 10^5 values only.
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kValues = 100000;
  constexpr bool kMeasureMemory = false;
#else
  constexpr int kValues = 1000000;
  constexpr bool kMeasureMemory = true;
#endif
  const std::string in = testing::TempDir() + "fp8lm_cli_million.txt";
  const std::string out = testing::TempDir() + "fp8lm_cli_million.json";
  {
    std::ofstream f(in);
    for (int i = 0; i < kValues; ++i) f << (i % 1000) * 0.5 - 250 << '\n';
  }
  // Peak RSS against the same binary encoding one value: held all at once, the million rows
  // took hundreds of MB (a JSON object each); streamed, a few MB at most. (The binary's own
  // start-up size varies: a CUDA build maps the CUDA libraries.)
  const std::string encode = std::string(FP8LM_BIN) + " fp8 encode --format e4m3 --json";
  const long one = peak_rss_kib(encode + " 1 > /dev/null");
  const long many = peak_rss_kib(encode + " < " + in + " > " + out);
  if (kMeasureMemory) {
    EXPECT_LT(many - one, 32 * 1024) << "KiB: " << one << " for one value, " << many;
  }
  std::ifstream f(out);
  const nlohmann::json rows = nlohmann::json::parse(f);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kValues));
  EXPECT_EQ(rows[kValues - 1]["input"], 249.5);
  EXPECT_EQ(rows[0]["code"].get<std::string>(), "0xf8");  // -250 rounds to -256
}

// Issue 12 (6): a byte model generates bytes that are not UTF-8; --json still prints valid JSON
// (U+FFFD in the text) with the exact bytes beside it.
TEST(Cli, GenerateJsonEscapesBytesThatAreNotUtf8) {
  const std::string data = testing::TempDir() + "fp8lm_cli_bytes.bin";
  {
    std::ofstream f(data, std::ios::binary);
    for (int i = 0; i < 2000; ++i) f << '\xff' << '\xfe';
  }
  const std::string dir = testing::TempDir() + "fp8lm_cli_bytes";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(fp8lm("train --data " + data +
                  " --steps 60 --lr 0.01 --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 "
                  "--ffn 64 --batch-size 4 --threads 2 --device cpu --out " +
                  dir)
                .status,
            0);
  // The prompt itself is the two invalid bytes (from the shell's printf).
  const CliResult r = fp8lm("generate --checkpoint " + dir +
                            "/model.safetensors --prompt \"$(printf '\\377\\376')\" "
                            "--max-new-tokens 8 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt"].get<std::string>(), "\xef\xbf\xbd\xef\xbf\xbd");  // U+FFFD each
  ASSERT_EQ(j["generated_bytes"].size(), 8u) << r.out;
  for (const auto& b : j["generated_bytes"])  // the model learnt its two bytes
    EXPECT_GE(b.get<int>(), 0xfe) << r.out;
  EXPECT_NE(j["generated"].get<std::string>().find("\xef\xbf\xbd"), std::string::npos) << r.out;
}

// Issue 12 (6): a resumed run keeps its --checkpoint-every and --keep-checkpoints, and its data
// path is stored absolute, so it resumes from any directory.
TEST(Cli, ResumeKeepsTheRunsCheckpointingAndFindsItsData) {
  const std::string root = testing::TempDir() + "fp8lm_cli_persist";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/work");
  {
    std::ofstream f(root + "/work/text.txt");
    for (int i = 0; i < 100; ++i) f << "some plain text to learn from. ";
  }
  const CliResult first =
      fp8lm("--version >/dev/null; cd " + root +
            "/work && " FP8LM_BIN
            " train --data text.txt --steps 4 --seq-len 12 --d-model 32 "
            "--n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 --threads 2 --device cpu "
            "--checkpoint-every 1 --keep-checkpoints 2 --stop-after 1 --out run");
  ASSERT_EQ(first.status, 0) << first.err;
  const std::string dir = root + "/work/run";
  std::ifstream in(dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config["data"], root + "/work/text.txt");
  EXPECT_EQ(config["run"]["checkpoint_every"], 1);
  EXPECT_EQ(config["run"]["keep_checkpoints"], 2);
  const CliResult resumed = fp8lm("train --resume " + dir);  // from another directory
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  std::set<std::string> kept;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/checkpoints"))
    if (e.is_directory()) kept.insert(e.path().filename());
  EXPECT_EQ(kept, (std::set<std::string>{"step-000003", "step-000004"}));
}

// Issue 12, point 5: a disk that fills mid-run (a file-size limit stands in for it) stops the
// run with one line and exit 1; metrics.jsonl keeps whole lines only, and no temporary file is
// left behind.
TEST(Cli, AWriteThatFailsStopsTheRunLoudly) {
  // dash's ulimit -f limits each file to so many 512-byte blocks: 1.5 KiB holds config.json
  // (about 1 KB) and fills metrics.jsonl after about 12 lines, before the first checkpoint
  // (step 20); 64 KiB holds the metrics but not that checkpoint's training state (about 80 KB).
  for (const auto& [blocks, file] :
       {std::pair{3, "metrics.jsonl"}, std::pair{128, "checkpoints"}}) {
    SCOPED_TRACE(file);
    const std::string dir = testing::TempDir() + "fp8lm_cli_full_disk";
    std::filesystem::remove_all(dir);
    const CliResult r = fp8lm(
        "train --precision fp32 --steps 40 --checkpoint-every 20 --vocab 16 --seq-len 12 "
        "--d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 --threads 2 "
        "--device cpu --out " +
            dir,
        "", "ulimit -f " + std::to_string(blocks) + ";");
    EXPECT_EQ(r.status, 1) << r.err;
    // Progress lines (stderr, not a terminal), then the error as the one last line.
    const std::vector<std::string> err = lines(r.err);
    ASSERT_FALSE(err.empty());
    EXPECT_EQ(err.back().rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find("error: "), r.err.rfind("error: ")) << r.err;
    EXPECT_NE(err.back().find(file), std::string::npos) << r.err;
    EXPECT_NE(err.back().find("File too large"), std::string::npos) << r.err;
    std::ifstream metrics(dir + "/metrics.jsonl");
    int n = 0;
    for (std::string line; std::getline(metrics, line); ++n)
      EXPECT_TRUE(nlohmann::json::accept(line)) << "torn line " << n << ": " << line;
    EXPECT_GT(n, 0);
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      EXPECT_NE(e.path().extension(), ".tmp") << e.path();
    EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoints/latest"));
  }
}

TEST(Cli, TrainConfigFileAndFlagOverride) {
  const std::string cfg = testing::TempDir() + "fp8lm_cfg.json";
  std::ofstream(cfg) << R"({"vocab": 16, "seq_len": 12, "d_model": 32, "n_layers": 1, "n_heads": 2,
                            "ffn": 64, "batch_size": 4, "steps": 50, "precision": "bf16"})";
  const CliResult r = fp8lm("train --config " + cfg + " --steps 2 --threads 2 --no-save");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("precision bf16 -> bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trained 2 steps"), std::string::npos) << r.out;
}

// Issue 14: a block-scaled recipe and NVFP4's switches from the config file (JSON booleans) and
// from flags (a switch alone is true), shown in the banner and kept in the run's config.
TEST(Cli, BlockScaledRecipesFromTheConfigAndFlags) {
  const std::string cfg = testing::TempDir() + "fp8lm_cfg_nvfp4.json";
  std::ofstream(cfg) << R"({"vocab": 16, "seq_len": 16, "d_model": 32, "n_layers": 1, "n_heads": 2,
                            "ffn": 64, "batch_size": 4, "precision": "fp8", "recipe": "nvfp4",
                            "disable_rht": true})";
  const std::string dir = testing::TempDir() + "fp8lm_cli_nvfp4";
  std::filesystem::remove_all(dir);
  const CliResult r = fp8lm("train --config " + cfg +
                            " --steps 2 --threads 2 --disable-stochastic-rounding --precision-map "
                            "'*.fc2' --out " +
                            dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("recipe: nvfp4 e2m1 1x16 blocks, e4m3 scales + fp32 tensor scale, rht=off "
                       "stochastic_rounding=off 2d_weights=on (emulated)"),
            std::string::npos)
      << r.out;
  std::ifstream in(dir + "/config.json");
  const auto config = nlohmann::json::parse(in);
  EXPECT_EQ(config["recipe"], "nvfp4");
  EXPECT_EQ(config["disable_rht"], true);
  EXPECT_EQ(config["disable_stochastic_rounding"], true);
  EXPECT_EQ(config["disable_2d_quantization"], false);
  EXPECT_NE(r.out.find("precision map *.fc2: 1 of 4 GEMMs in BF16 (layers.0.fc2)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(config["precision_map"], "*.fc2");
  const CliResult shown = fp8lm("inspect " + dir);
  EXPECT_NE(shown.out.find("layers.0.fc2 · bf16 (precision map)"), std::string::npos) << shown.out;
  // Point 5: each FP4 GEMM's tensors with their block-scale exponents, the saturated and flushed
  // blocks and the tensor scale, in inspect and in the report's heatmap (steps 1 and 2).
  EXPECT_NE(shown.out.find("recipe nvfp4 e2m1"), std::string::npos) << shown.out;
  for (const char* role :
       {"input ", "input_columnwise", "weight ", "grad_output ", "grad_output_columnwise"}) {
    EXPECT_NE(shown.out.find("  " + std::string(role)), std::string::npos) << role << shown.out;
  }
  EXPECT_NE(shown.out.find("· tensor scale "), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find("layers.0.fc2\n  input"), std::string::npos) << "fc2 is BF16";
  const CliResult shown_json = fp8lm("inspect --json " + dir);
  const auto j = nlohmann::json::parse(shown_json.out);
  EXPECT_GT(j["block_scales"]["layers.0.fc1"]["weight"]["blocks"].get<int>(), 0);
  std::ifstream report(dir + "/report.html");
  const std::string html(std::istreambuf_iterator<char>(report), {});
  EXPECT_NE(html.find("class=\"heatmap\""), std::string::npos);
  EXPECT_NE(html.find("<title>layers.0.qkv grad_output_columnwise step 2: median 2^"),
            std::string::npos);
  const CliResult resumed = fp8lm("train --resume " + dir);
  EXPECT_NE(resumed.out.find("rht=off stochastic_rounding=off"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("precision map *.fc2"), std::string::npos) << resumed.out;
}

TEST(Cli, TrainBadConfigIsOneLineError) {
  const std::string empty = testing::TempDir() + "fp8lm_cli_empty.txt";
  std::ofstream(empty).close();
  const std::string bad_json = testing::TempDir() + "fp8lm_bad.json";
  std::ofstream(bad_json) << "{\"d_model\": ";
  const std::string bad[] = {
      "train --n-heads 7",
      "train --d-model 0",
      "train --seq-len -4",
      "train --precision fp16",
      "train --recipe sometimes",
      "train --fp8-format e5m2",
      "train --amax-history-len 0",
      "train --amax-compute-algo mean",
      "train --steps ten",
      "train --lr nan",
      "train --data /nonexistent/corpus.txt",
      "train --data " + empty,
      "train --fp8-weights --precision fp32",
      "train --config /nonexistent/cfg.json",
      "train --config " + bad_json,
      "train --bogus-flag 3",
  };
  for (const std::string& args : bad) {
    const CliResult r = fp8lm(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err).size(), 1u) << args << ": " << r.err;
  }
}

TEST(Cli, GenerateEvalInspectOnATrainedRun) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_gen";
  std::filesystem::remove_all(dir);
  const std::string tiny =
      "--vocab 16 --seq-len 12 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 "
      "--threads 2";
  ASSERT_EQ(fp8lm("train --precision fp8 --amax-history-len 8 --steps 4 " + tiny + " --out " + dir)
                .status,
            0);
  // Nothing a user had is overwritten: a second run into the same directory is refused.
  const CliResult again = fp8lm("train --steps 2 " + tiny + " --out " + dir);
  EXPECT_NE(again.status, 0);
  EXPECT_NE(again.err.find("already holds a run"), std::string::npos) << again.err;

  const std::string model = dir + "/model.safetensors";
  CliResult r = fp8lm("generate --checkpoint " + model + " --prompt '3 5 7' --max-new-tokens 5");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out).size(), 1u);
  std::istringstream ids(r.out);
  int n = 0;
  for (int id; ids >> id; ++n) EXPECT_TRUE(id >= 0 && id < 16) << id;
  EXPECT_EQ(n, 5);
  r = fp8lm("generate --checkpoint " + model + " --prompt '3 5 7' --max-new-tokens 5 --json");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt"], (std::vector<int>{3, 5, 7}));
  EXPECT_EQ(j["generated"].size(), 5u);
  EXPECT_TRUE(j["stride_kept"].is_boolean());

  r = fp8lm("eval --checkpoint " + model + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto e = nlohmann::json::parse(r.out);
  EXPECT_GT(e["loss"].get<double>(), 0.0);
  EXPECT_NEAR(e["perplexity"].get<double>(), std::exp(e["loss"].get<double>()), 1e-9);
  EXPECT_TRUE(e.contains("stride_accuracy"));

  r = fp8lm("inspect " + dir + " --layer 0 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto ins = nlohmann::json::parse(r.out);
  ASSERT_EQ(ins["gemms"].size(), 4u * 5u);  // qkv, proj, fc1, fc2 x 5 slots
  const auto& input = ins["gemms"][0];
  EXPECT_EQ(input["slot"], "input");
  EXPECT_EQ(input["format"], "e4m3");
  EXPECT_NE(input["scale"].get<float>(), 1.0f);  // moved after the first steps
  EXPECT_EQ(input["amax_history_len"], 8);       // the configured --amax-history-len
  EXPECT_TRUE(input.contains("saturated_fraction"));
  EXPECT_EQ(ins["gemms"][3]["format"], "e5m2");  // grad_output under HYBRID

  const char* bad[] = {"generate --checkpoint /nonexistent.safetensors --prompt '1 2'",
                       "inspect /nonexistent-run", "eval --checkpoint /nonexistent.safetensors"};
  for (const char* args : bad) {
    const CliResult b = fp8lm(args);
    EXPECT_NE(b.status, 0) << args;
    EXPECT_EQ(lines(b.err).size(), 1u) << args << ": " << b.err;
  }
  const std::string bad_prompt[] = {"'1 99'", "'x'", "''"};
  for (const std::string& p : bad_prompt) {
    const CliResult b = fp8lm("generate --checkpoint " + model + " --prompt " + p);
    EXPECT_NE(b.status, 0) << p;
    EXPECT_EQ(b.err.rfind("error: ", 0), 0u) << p << ": " << b.err;
  }
  EXPECT_NE(fp8lm("generate --checkpoint " + model + " --prompt '1 2' --max-new-tokens 50").status,
            0);
}

// Issue 15 (5): sampling is reproducible for a seed and changes with it; --top-k 1 is greedy;
// --stop-token and --stop end the output after the first stop, which is a prefix of the
// unstopped output; bad sampling flags are one-line errors.
TEST(Cli, GenerateSamplesForASeedAndStops) {
  const std::string data = testing::TempDir() + "fp8lm_cli_sample.txt";
  {
    std::ofstream f(data);
    for (int i = 0; i < 500; ++i) f << "abc de\n";
  }
  const std::string dir = testing::TempDir() + "fp8lm_cli_sample";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(fp8lm("train --data " + data +
                  " --steps 30 --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 "
                  "--batch-size 4 --threads 2 --device cpu --out " +
                  dir)
                .status,
            0);
  const std::string gen = "generate --checkpoint " + dir + "/model.safetensors --prompt ab --json ";
  const auto bytes = [&](const std::string& flags) {
    const CliResult r = fp8lm(gen + flags);
    EXPECT_EQ(r.status, 0) << flags << ": " << r.err;
    return nlohmann::json::parse(r.out)["generated_bytes"].get<std::vector<int>>();
  };
  const auto greedy = bytes("--max-new-tokens 14");
  ASSERT_EQ(greedy.size(), 14u);
  const auto hot = bytes("--max-new-tokens 14 --temperature 3 --seed 5");
  EXPECT_EQ(bytes("--max-new-tokens 14 --temperature 3 --seed 5"), hot);
  EXPECT_NE(bytes("--max-new-tokens 14 --temperature 3 --seed 6"), hot);
  EXPECT_EQ(bytes("--max-new-tokens 14 --temperature 3 --top-k 1 --seed 5"), greedy);
  // Stops: each output is the unstopped one up to and including the first stop.
  const auto until = [](const std::vector<int>& v, const std::vector<int>& stop) {
    auto end = std::search(v.begin(), v.end(), stop.begin(), stop.end());
    return std::vector<int>(v.begin(), end == v.end() ? end : end + static_cast<long>(stop.size()));
  };
  EXPECT_EQ(bytes("--max-new-tokens 14 --stop-token " + std::to_string(greedy[2])),
            until(greedy, {greedy[2]}));
  EXPECT_EQ(bytes("--max-new-tokens 14 --stop '\\n'"), until(greedy, {'\n'}));
  const std::string pair{static_cast<char>(greedy[3]), static_cast<char>(greedy[4])};
  if (std::isalpha(greedy[3]) && std::isalpha(greedy[4])) {
    EXPECT_EQ(bytes("--max-new-tokens 14 --stop " + pair), until(greedy, {greedy[3], greedy[4]}));
  }
  const auto hot_stopped =
      bytes("--max-new-tokens 14 --temperature 3 --seed 5 --stop-token " + std::to_string(hot[4]));
  EXPECT_EQ(hot_stopped, until(hot, {hot[4]}));
  // Streamed (no --json): the bytes as they came, then a newline.
  const CliResult plain =
      fp8lm("generate --checkpoint " + dir + "/model.safetensors --prompt ab --max-new-tokens 14");
  EXPECT_EQ(plain.out, std::string(greedy.begin(), greedy.end()) + "\n");

  for (const std::string flags :
       {"--temperature -1", "--temperature 1 --top-p 0", "--temperature 1 --top-p 1.5", "--top-k 5",
        "--top-p 0.5", "--temperature 1 --top-k -2", "--stop-token 300", "--stop 'a\\q'",
        "--stop ''"}) {
    const CliResult b = fp8lm(gen + flags);
    EXPECT_NE(b.status, 0) << flags;
    EXPECT_EQ(b.err.rfind("error: ", 0), 0u) << flags << ": " << b.err;
    EXPECT_EQ(lines(b.err).size(), 1u) << flags << ": " << b.err;
  }
}

// Issue 15 (1): tokenizer train writes a tokenizer.json (never over an existing file) that
// encode and decode use; --jsonl encodes a document per line; bad input is one line.
// A Llama-style model trained in FP8 goes out to Hugging Face's layout and back: the imported
// model gives the same logits bit for bit, evaluates, generates and fine-tunes in FP8 (--init).
TEST(Cli, ExportImportEvalGenerateAndFineTune) {
  const std::string root = testing::TempDir() + "fp8lm_cli_hf";
  std::filesystem::remove_all(root);
  const std::string llama =
      "--vocab 16 --seq-len 12 --d-model 32 --n-layers 1 --n-heads 4 --ffn 64 --batch-size 4 "
      "--threads 2 --device cpu --n-kv-heads 2 --normalization rmsnorm --activation swiglu "
      "--rope-theta 10000 --bias false --tie-embeddings false";
  ASSERT_EQ(fp8lm("train --precision fp8 --steps 3 " + llama + " --out " + root + "/run").status,
            0);
  CliResult r = fp8lm("export " + root + "/run " + root + "/hf");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("LlamaForCausalLM"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(root + "/hf/config.json"));
  r = fp8lm("export " + root + "/run " + root + "/hf");  // nothing a user had is overwritten
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("not an empty directory"), std::string::npos) << r.err;
  r = fp8lm("export --dtype fp16 " + root + "/run " + root + "/hf16");
  EXPECT_NE(r.err.find("--dtype 'fp16' is not fp32 or bf16"), std::string::npos) << r.err;

  // --fp8-codes from a run that keeps FP8 weights: the model file's codes, as they are, in the
  // Hugging Face tensors' names and row blocks (q_proj, k_proj, v_proj of the fused qkv).
  ASSERT_EQ(
      fp8lm("train --precision fp8 --fp8-weights --steps 2 " + llama + " --out " + root + "/run8")
          .status,
      0);
  r = fp8lm("export --fp8-codes " + root + "/run8 " + root + "/hf8");
  ASSERT_EQ(r.status, 0) << r.err;
  {
    const Safetensors ours = Safetensors::read(root + "/run8/model.safetensors");
    const Safetensors codes = Safetensors::read(root + "/hf8/fp8_weights.safetensors");
    const TensorData& qkv = ours.at("layers.0.qkv.weight");  // [32 + 2*16, 32] E4M3
    ASSERT_EQ(qkv.dtype, DType::E4M3);
    const auto rows = [&](int64_t first, int64_t n) {
      return std::vector<uint8_t>(qkv.bytes.begin() + first * 32,
                                  qkv.bytes.begin() + (first + n) * 32);
    };
    const auto bytes = [&](const std::string& name) {
      const TensorData& t = codes.at(name);
      EXPECT_EQ(t.dtype, DType::E4M3) << name;
      return std::vector<uint8_t>(t.bytes.begin(), t.bytes.end());
    };
    EXPECT_EQ(bytes("model.layers.0.self_attn.q_proj.weight"), rows(0, 32));
    EXPECT_EQ(bytes("model.layers.0.self_attn.k_proj.weight"), rows(32, 16));
    EXPECT_EQ(bytes("model.layers.0.self_attn.v_proj.weight"), rows(48, 16));
    EXPECT_EQ(codes.at("model.layers.0.self_attn.k_proj.weight.scale_inv").to_f32(),
              ours.at("layers.0.qkv.weight_scale_inv").to_f32());
    EXPECT_FALSE(codes.contains("lm_head.weight"));  // the head is not an FP8 GEMM
  }
  r = fp8lm("export --fp8-codes " + root + "/imported-none " + root + "/hf9");
  EXPECT_NE(r.status, 0);
  ASSERT_EQ(fp8lm("train --precision fp8 --recipe mxfp8 --steps 1 " + llama + " --out " + root +
                  "/run-mx")
                .status,
            0);
  r = fp8lm("export --fp8-codes " + root + "/run-mx " + root + "/hf-mx");
  EXPECT_NE(r.err.find("--fp8-codes: the mxfp8 recipe's block-scaled codes stay in fp8lm's model "
                       "file; per-tensor recipes (delayed, current) only\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(root + "/hf-mx/model.safetensors"));

  r = fp8lm("import " + root + "/hf --out " + root + "/imported");
  ASSERT_EQ(r.status, 0) << r.err;
  r = fp8lm("export --fp8-codes " + root + "/imported " + root + "/hf-not-fp8");
  EXPECT_NE(r.err.find("--fp8-codes: the model did not train in FP8"), std::string::npos) << r.err;
  const std::string tokens = " --tokens '1 2 3 4 5 6 7 8'";
  const CliResult original = fp8lm("logits --checkpoint " + root + "/run" + tokens);
  const CliResult imported = fp8lm("logits --checkpoint " + root + "/imported" + tokens);
  ASSERT_EQ(original.status, 0) << original.err;
  EXPECT_EQ(imported.out, original.out);
  EXPECT_EQ(nlohmann::json::parse(imported.out).size(), 8u);

  const std::string model = root + "/imported/model.safetensors";
  // An imported model has no held-out data of its own (it once measured stride accuracy).
  r = fp8lm("eval --checkpoint " + model);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("came without its data (fp8lm import): give --data"), std::string::npos)
      << r.err;
  r = fp8lm("generate --checkpoint " + model + " --prompt '3 5 7' --max-new-tokens 4");
  ASSERT_EQ(r.status, 0) << r.err;
  // An imported model reads text through --tokenizer, one that fits its vocabulary.
  {
    std::ofstream(root + "/text.txt") << "the quick brown fox jumps over the lazy dog\n";
    ASSERT_EQ(
        fp8lm("tokenizer train --vocab-size 270 --out " + root + "/tok.json " + root + "/text.txt")
            .status,
        0);
    r = fp8lm("generate --checkpoint " + model + " --tokenizer " + root +
              "/tok.json --prompt 'the fox'");
    EXPECT_NE(r.err.find("more than the model's vocabulary 16"), std::string::npos) << r.err;
    // A tokenizer.json beside an imported model (fp8lm import copies Hugging Face's) is its own.
    std::filesystem::copy_file(root + "/tok.json", root + "/imported/tokenizer.json");
    r = fp8lm("generate --checkpoint " + root + "/imported --prompt 'the fox'");
    EXPECT_NE(r.err.find("tokenizer " + root + "/imported/tokenizer.json: 259 tokens, more than"),
              std::string::npos)
        << r.err;
    std::filesystem::remove(root + "/imported/tokenizer.json");
  }
  r = fp8lm("train --precision fp8 --steps 2 --threads 2 --device cpu --batch-size 4 --init " +
            model + " --out " + root + "/tuned");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 kv heads · rope 10000"), std::string::npos) << r.out;
  r = fp8lm("train --init " + model + " --resume " + root + "/tuned");
  EXPECT_NE(r.err.find("--init starts a new run"), std::string::npos) << r.err;
  r = fp8lm("import " + root + "/run --out " + root + "/bad");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("config.json: no model_type; not a Hugging Face model's config"),
            std::string::npos)
      << r.err;
}

TEST(Cli, TokenizerTrainEncodeDecode) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_tok";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/empty");
  {
    std::ofstream f(dir + "/a.txt");
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
    std::ofstream j(dir + "/b.jsonl");
    j << "{\"text\": \"héllo wörld\"}\n\n{\"text\": \"second document\"}\n";
  }
  const std::string tok = dir + "/tokenizer.json";
  CliResult r = fp8lm("tokenizer train --vocab-size 400 --out " + tok + " " + dir + "/a.txt " +
                      dir + "/b.jsonl");
  ASSERT_EQ(r.status, 0) << r.err;
  // 256 bytes, <|endoftext|> and the merges of pairs seen twice or more (fewer than 143 here).
  EXPECT_NE(r.out.find("learnt a vocabulary of "), std::string::npos) << r.out;
  EXPECT_GT(std::stoi(r.out.substr(23)), 280) << r.out;
  r = fp8lm("tokenizer encode --tokenizer " + tok + " 'the lazy dog'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<std::string> ids{std::istream_iterator<std::string>(in), {}};
  EXPECT_LT(ids.size(), 6u) << r.out;  // merged words, not 12 bytes
  r = fp8lm("tokenizer decode --tokenizer " + tok + " " + r.out);
  EXPECT_EQ(r.out, "the lazy dog");
  r = fp8lm("tokenizer encode --tokenizer " + tok + " --jsonl --file " + dir + "/b.jsonl");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(lines(r.out).size(), 2u) << r.out;
  const auto first = nlohmann::json::parse(lines(r.out)[0]).get<std::vector<int>>();
  std::string decode = "tokenizer decode --tokenizer " + tok;
  for (const int id : first) decode.append(1, ' ').append(std::to_string(id));
  EXPECT_EQ(fp8lm(decode).out, "héllo wörld");

  const std::string bad[] = {
      "tokenizer train --vocab-size 400 --out " + tok + " " + dir + "/a.txt",  // exists
      "tokenizer train --vocab-size 100 --out " + dir + "/t2.json " + dir + "/a.txt",
      "tokenizer train --out " + dir + "/t3.json " + dir + "/missing.txt",
      "tokenizer encode --tokenizer " + dir + "/a.txt hello",  // not JSON
      "tokenizer encode --tokenizer " + dir + "/empty hello",  // no tokenizer in it
      "tokenizer decode --tokenizer " + tok + " 5 99999",
      "tokenizer encode --tokenizer " + tok + " --jsonl --file " + dir + "/a.txt"};
  for (const std::string& args : bad) {
    const CliResult b = fp8lm(args);
    EXPECT_NE(b.status, 0) << args;
    EXPECT_EQ(b.err.rfind("error: ", 0), 0u) << args << ": " << b.err;
    EXPECT_EQ(lines(b.err).size(), 1u) << args << ": " << b.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/t2.json"));
}

// Issue 15 (2): data prepare writes shards, a validation shard, the tokenizer and a manifest;
// train --data DIR reads them (its vocabulary the tokenizer's), and a run resumed from a
// checkpoint in the middle of the shard continues with the exact next batches: every later
// loss equals the uninterrupted run's. Bad input is one line and writes nothing.
TEST(Cli, DataPrepareTrainsOnShardsAndResumesExactly) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_data";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/a.txt");
    for (int i = 0; i < 600; ++i)
      f << "line " << i << ": the " << (i % 3 ? "quick" : "slow") << " fox, " << i * 7 << "\n";
  }
  ASSERT_EQ(
      fp8lm("tokenizer train --vocab-size 300 --out " + dir + "/tok.json " + dir + "/a.txt").status,
      0);
  const std::string ds = dir + "/ds";
  CliResult r = fp8lm("data prepare --tokenizer " + dir + "/tok.json --out " + ds +
                      " --split-lines --val-fraction 0.1 --shard-tokens 4096 " + dir + "/a.txt");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("prepared 600 documents"), std::string::npos) << r.out;
  const auto manifest = nlohmann::json::parse(std::ifstream(ds + "/manifest.json"));
  EXPECT_EQ(manifest["vocab_size"], 300);
  EXPECT_GT(manifest["train"].size(), 1u) << "several shards of 4096 tokens";
  EXPECT_GT(manifest["validation_documents"].get<int>(), 20);
  EXPECT_TRUE(std::filesystem::exists(ds + "/tokenizer.json"));

  const std::string model =
      " --seq-len 32 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 --threads 2 "
      "--precision fp8 --steps 24 --checkpoint-every 8 --device cpu --out ";
  r = fp8lm("train --data " + ds + model + dir + "/full");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("vocab 300"), std::string::npos) << r.out;

  std::filesystem::copy(dir + "/full", dir + "/cut", std::filesystem::copy_options::recursive);
  std::ofstream(dir + "/cut/checkpoints/latest") << "step-000008\n";
  r = fp8lm("train --resume " + dir + "/cut");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("at step 8 of 24"), std::string::npos) << r.out;
  const auto losses = [&](const std::string& run) {
    std::vector<double> v;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string l; std::getline(in, l);) v.push_back(nlohmann::json::parse(l)["loss"]);
    return v;
  };
  const auto full = losses(dir + "/full"), cut = losses(dir + "/cut");
  ASSERT_EQ(full.size(), 24u);
  EXPECT_EQ(cut, full);
  r = fp8lm("eval --checkpoint " + dir + "/full/model.safetensors --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["loss"].get<double>(), 0.0);
  // Generation reads and writes text through the dataset's tokenizer and stops at its end of
  // text (id 0, the tokenizer's first special token).
  r = fp8lm("generate --checkpoint " + dir +
            "/full/model.safetensors --prompt 'line 5: the' --max-new-tokens 20 --temperature 1 "
            "--seed 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto g = nlohmann::json::parse(r.out);
  const auto gen_ids = g["generated_ids"].get<std::vector<int>>();
  ASSERT_FALSE(gen_ids.empty());
  for (size_t i = 0; i + 1 < gen_ids.size(); ++i)
    EXPECT_NE(gen_ids[i], 0) << "stopped at the first";
  EXPECT_TRUE(gen_ids.size() == 20 || gen_ids.back() == 0);
  std::string decode = "tokenizer decode --json --tokenizer " + dir + "/tok.json";
  for (const int id : gen_ids) decode.append(1, ' ').append(std::to_string(id));
  EXPECT_EQ(nlohmann::json::parse(fp8lm(decode).out), g["generated"]);  // U+FFFD alike

  const std::string bad[] = {
      "data prepare --tokenizer " + dir + "/tok.json --out " + ds + " " + dir + "/a.txt",
      "data prepare --tokenizer " + dir + "/tok.json --out " + dir + "/one " + dir + "/a.txt",
      "data prepare --tokenizer " + dir + "/tok.json --out " + dir + "/two --eot '<none>' " + dir +
          "/a.txt",
      "data prepare --tokenizer " + dir + "/a.txt --out " + dir + "/three " + dir + "/a.txt",
      "data prepare --tokenizer " + dir + "/tok.json --out " + dir + "/four --val-fraction 2 " +
          dir + "/a.txt",
      "train --data " + ds + " --vocab 100 --steps 1",
  };
  for (const std::string& args : bad) {
    const CliResult b = fp8lm(args);
    EXPECT_NE(b.status, 0) << args;
    EXPECT_EQ(b.err.rfind("error: ", 0), 0u) << args << ": " << b.err;
    EXPECT_EQ(lines(b.err).size(), 1u) << args << ": " << b.err;
  }
  for (const char* name : {"/one", "/two", "/three", "/four", "/one.preparing"})
    EXPECT_FALSE(std::filesystem::exists(dir + name)) << name;
  std::ofstream(ds + "/train-00000.tok", std::ios::app) << "x";  // now one byte too long
  r = fp8lm("train --data " + ds + model + dir + "/five");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("train-00000.tok"), std::string::npos) << r.err;
}

TEST(Cli, InspectSaysAnFp32RunHasNoFp8State) {
  const std::string dir = testing::TempDir() + "fp8lm_cli_fp32";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(fp8lm("train --precision fp32 --steps 2 --vocab 16 --seq-len 12 --d-model 32 "
                  "--n-layers 1 --n-heads 2 "
                  "--ffn 64 --batch-size 4 --threads 2 --out " +
                  dir)
                .status,
            0);
  const CliResult r = fp8lm("inspect " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no FP8 state"), std::string::npos) << r.out;
}

TEST(Cli, HelpAndVersion) {
  CliResult r = fp8lm("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("fp8lm ", 0), 0u);
  r = fp8lm("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("doctor"), std::string::npos);
}

TEST(Cli, DoctorReportsCpuCudaAndPrecision) {
  const CliResult r = fp8lm("doctor");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("cpu: "), std::string::npos);
  EXPECT_NE(r.out.find("avx512_bf16 "), std::string::npos);
  EXPECT_NE(r.out.find("cuda: "), std::string::npos);
  EXPECT_NE(r.out.find("precision auto -> "), std::string::npos);
  // Issue 14 (6): the GEMM engine and oneDNN's kernel behind it (its names are kind:isa).
  EXPECT_TRUE(std::regex_search(r.out, std::regex("GEMM engine: (onednn-bf16|widen-to-fp32) "
                                                  "\\(oneDNN [a-z_]+:[a-z0-9_:]+")))
      << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("bf16 attention products: (vdpbf16ps|fma|generic)\n")))
      << r.out;
}

// FP8LM_MAX_ISA caps the kernels' instruction set: doctor shows AVX-512 as absent and the
// quantize kernels one step down, training runs on those paths, and a value it does not know
// is one line naming it.
TEST(Cli, MaxIsaCapsTheKernelsAndABadValueIsNamed) {
  const CliResult full = fp8lm("doctor");
  ASSERT_EQ(full.status, 0) << full.err;
  const CliResult d = fp8lm("doctor", "", "export FP8LM_MAX_ISA=avx2;");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.out.find("avx512 no · avx512_bf16 no · amx_bf16 no"), std::string::npos) << d.out;
  if (full.out.find("avx512 yes") != std::string::npos) {
    EXPECT_NE(d.out.find("capped by FP8LM_MAX_ISA=avx2"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("fp8 quantize kernels: avx2"), std::string::npos) << d.out;
  }
  const std::string dir = testing::TempDir() + "fp8lm_cli_max_isa";
  std::filesystem::remove_all(dir);
  const CliResult t = fp8lm("train --precision fp8 --recipe nvfp4 --steps 2 --out " + dir, "",
                            "export FP8LM_MAX_ISA=scalar;");
  EXPECT_EQ(t.status, 0) << t.err;
  const CliResult bad = fp8lm("doctor", "", "export FP8LM_MAX_ISA=avx1024;");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "error: FP8LM_MAX_ISA: 'avx1024' is not avx512, avx2 or scalar\n");
}

// Issue 13 (1): doctor says whether this build has MPI. A build without it refuses a launch as
// one of several ranks (mpirun's environment, set here by hand) with one line naming the
// launcher, and makes no run directory; with MPI, ctest's DataParallel.* runs the real thing.
TEST(Cli, MpiIsReportedAndAMultiRankLaunchWithoutItIsRefused) {
  const CliResult d = fp8lm("doctor");
  ASSERT_EQ(d.status, 0) << d.err;
  if (d.out.find("mpi: built (") != std::string::npos) {
    EXPECT_NE(d.out.find("MPI"), std::string::npos) << d.out;  // the library's name
    GTEST_SKIP() << "built with MPI: the refusal is for builds without it";
  }
  EXPECT_NE(d.out.find("mpi: not built"), std::string::npos) << d.out;
  const std::string dir = testing::TempDir() + "fp8lm_cli_mpi_refused";
  std::filesystem::remove_all(dir);
  const CliResult r =
      fp8lm("train --steps 2 --out " + dir, "",
            "export OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0;");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "error: launched as rank 0 of 2 by Open MPI's mpirun, but this fp8lm was built "
            "without MPI: install libopenmpi-dev (scripts/deps) and build again, or run one "
            "process\n");
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace fp8lm
