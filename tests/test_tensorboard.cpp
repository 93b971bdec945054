// Issue 32: TensorBoard event files. The TFRecord framing against CRC-32C's published check
// value and its own definition, a writer's records parsed back as TensorBoard's Event (the
// tags, steps and values of a metrics record, bit for bit as float32), and a run's tb/ beside
// metrics.jsonl (--no-tensorboard: none, also after a resume). The tensorboard package's own
// reader runs in tools/tensorboard_check.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "io/tensorboard_event.pb.h"
#include "io/tensorboard_writer.h"
#include "io/tfrecord.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

// The records of a TFRecord file, each CRC checked.
std::vector<std::string> records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t n = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), masked_crc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, n);
    EXPECT_EQ(le(bytes, at + 12 + n, 4), masked_crc32c(data));
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + name;
  fs::remove_all(dir);
  return dir;
}

TEST(TfRecord, Crc32cIsCastagnolisAndTheFramingHoldsLengthAndMaskedCrcs) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);  // the published check value
  EXPECT_EQ(crc32c(""), 0u);
  const uint32_t c = crc32c("fp8lm");
  EXPECT_EQ(masked_crc32c("fp8lm"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  for (const std::string& data : {std::string(), std::string("x"), std::string(300, '\0')}) {
    const std::string r = tfrecord(data);
    ASSERT_EQ(r.size(), data.size() + 16);
    EXPECT_EQ(records(r), std::vector<std::string>{data});
  }
}

TEST(TensorBoardWriter, ARecordsNumbersAreOneEventOfScalarsWithItsStep) {
  const std::string dir = fresh_dir("fp8lm_tb_writer");
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.scalars(3, {{"step", 3},
                  {"loss", 4.9118523597717285},
                  {"lr", 1e-4},
                  {"skipped", true},
                  {"val_loss", nullptr},
                  {"fp8", {{"blocks.0.fc1", {{"input", {{"scale", 448.0}, {"amax", 1.5}}}}}}}});
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir));
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::vector<std::string> recs = records(read_file(path));
  ASSERT_EQ(recs.size(), 2u);
  tensorboard::Event first, event;
  ASSERT_TRUE(first.ParseFromString(recs[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  ASSERT_TRUE(event.ParseFromString(recs[1]));
  EXPECT_EQ(event.step(), 3);
  EXPECT_GT(event.wall_time(), 1.6e9);
  std::map<std::string, float> got;
  for (const auto& v : event.summary().value()) got[v.tag()] = v.simple_value();
  const std::map<std::string, float> want = {{"loss", 4.9118523597717285f},
                                             {"lr", 1e-4f},
                                             {"fp8/blocks.0.fc1/input/scale", 448.0f},
                                             {"fp8/blocks.0.fc1/input/amax", 1.5f}};
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [tag, value] : want) {
    ASSERT_TRUE(got.count(tag)) << tag;
    EXPECT_EQ(std::memcmp(&got[tag], &value, sizeof value), 0) << tag;
  }
}

TEST(TensorBoardWriter, AHistogramCountsEveryFiniteValueInItsBucket) {
  const std::string dir = fresh_dir("fp8lm_tb_histogram");
  std::string path;
  const std::vector<float> values = {0.0f, 0.0f, 1.0f, 3.0f, NAN, 3.0f, INFINITY};
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.histogram(7, "amax_history/blocks.0.fc1/input", values);
    w.histogram(8, "constant", std::vector<float>{2.0f, 2.0f});
    w.histogram(9, "nothing finite", std::vector<float>{NAN});  // no record
  }
  const std::vector<std::string> recs = records(read_file(path));
  ASSERT_EQ(recs.size(), 3u);
  tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(recs[1]));
  EXPECT_EQ(e.step(), 7);
  ASSERT_EQ(e.summary().value_size(), 1);
  EXPECT_EQ(e.summary().value(0).tag(), "amax_history/blocks.0.fc1/input");
  const tensorboard::HistogramProto& h = e.summary().value(0).histo();
  EXPECT_EQ(h.min(), 0.0);
  EXPECT_EQ(h.max(), 3.0);
  EXPECT_EQ(h.num(), 5.0);
  EXPECT_EQ(h.sum(), 7.0);
  EXPECT_EQ(h.sum_squares(), 19.0);
  ASSERT_EQ(h.bucket_size(), 30);
  ASSERT_EQ(h.bucket_limit_size(), 30);
  EXPECT_EQ(h.bucket_limit(29), 3.0);
  EXPECT_EQ(h.bucket(0), 2.0);   // the zeros: (.., 0.1]
  EXPECT_EQ(h.bucket(9), 1.0);   // 1: (0.9, 1.0]
  EXPECT_EQ(h.bucket(29), 2.0);  // the threes: (2.9, 3]
  ASSERT_TRUE(e.ParseFromString(recs[2]));
  const tensorboard::HistogramProto& c = e.summary().value(0).histo();
  ASSERT_EQ(c.bucket_size(), 1);
  EXPECT_EQ(c.bucket(0), 2.0);
  EXPECT_EQ(c.bucket_limit(0), 2.0);
}

TEST(TensorBoardWriter, ADirectoryThatCannotBeMadeIsNamed) {
  const std::string file = fresh_dir("fp8lm_tb_blocked");
  std::ofstream(file) << "a file where the directory should be";
  try {
    TensorBoardWriter w(file + "/tb");
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(file + "/tb"), std::string::npos) << e.what();
  }
}

TEST(TensorBoardRun, EveryStepIsInTbAndNoTensorboardKeepsItOffAcrossAResume) {
  const std::string base = fresh_dir("fp8lm_tb_run");
  const std::string on = base + "/on", off = base + "/off";
  ASSERT_EQ(fp8lm("train --steps 3 " + kTinyModel + " --out " + on).status, 0);
  const auto files = [](const std::string& dir) {
    std::vector<std::string> f;
    if (fs::is_directory(dir))
      for (const auto& e : fs::directory_iterator(dir)) f.push_back(e.path().string());
    return f;
  };
  ASSERT_EQ(files(on + "/tb").size(), 1u);
  // The file_version record, then one Event per step.
  EXPECT_EQ(records(read_file(files(on + "/tb")[0])).size(), 4u);
  const CliResult r =
      fp8lm("train --steps 2 --checkpoint-every 1 --stop-after 1 --no-tensorboard " + kTinyModel +
            " --out " + off);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(off + "/tb"));
  ASSERT_EQ(fp8lm("train --resume " + off).status, 0);
  EXPECT_FALSE(fs::exists(off + "/tb"));
  EXPECT_EQ(nlohmann::json::parse(read_file(off + "/config.json"))["run"]["tensorboard"], false);
}

}  // namespace
}  // namespace fp8lm
