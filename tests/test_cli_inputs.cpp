// Issue 30: hostile input files, as a user (or an attacker) hands them to the program. Every
// command opens an input through one opener (core/input_file.h: regular files only, a size
// bound, errno's reason) and reads JSON through one depth-limited reader (core/json.h). Each
// command runs under `timeout`, so a regression that blocks fails (status 124) instead of
// hanging the suite.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "io/report.h"

namespace fp8lm {
namespace {
namespace fs = std::filesystem;

constexpr auto npos = std::string::npos;
const std::string kTokenizer = FP8LM_SOURCE_DIR "/tests/data/tokenizer/tokenizer.json";

std::string fresh(const std::string& name) {
  const std::string dir = testing::TempDir() + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The probe's input: {"a": nested `depth` times.
std::string deep_json(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  return s + std::string(static_cast<size_t>(depth), '}');
}

CliResult bounded(const std::string& args, const std::string& prefix = "") {
  return fp8lm(args, "", prefix + " timeout 120");
}

// A finished tiny run with a checkpoint per step, trained once per test process (in a directory
// of the test's own: ctest runs tests as parallel processes sharing TempDir()).
const std::string& tiny_run() {
  static const std::string dir = [] {
    const std::string d = fresh(std::string("fp8lm_inputs_run_") +
                                testing::UnitTest::GetInstance()->current_test_info()->name()) +
                          "/run";
    const CliResult r = fp8lm("train --steps 2 --checkpoint-every 1 " + kTinyModel + " --out " + d);
    EXPECT_EQ(r.status, 0) << r.err;
    return d;
  }();
  return dir;
}

std::string copy_of_run(const std::string& name) {
  const std::string dir = fresh(name) + "/run";
  fs::copy(tiny_run(), dir, fs::copy_options::recursive);
  return dir;
}

// D2: {"a": x 100000 overflowed the stack (nlohmann's dump and copies recurse).
TEST(CliInputs, DeeplyNestedConfigIsRefusedNotAStackOverflow) {
  const std::string dir = fresh("fp8lm_inputs_deep");
  write(dir + "/c.json", deep_json(100000));
  const CliResult r = bounded("train --config " + dir + "/c.json --out " + dir + "/run");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--config " + dir + "/c.json: JSON nested deeper than 64 levels"), npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir + "/run"));
}

TEST(CliInputs, DeeplyNestedRopeScalingInAnImportIsRefused) {
  const std::string dir = fresh("fp8lm_inputs_deep_hf");
  fs::copy(FP8LM_SOURCE_DIR "/tests/data/hf/llama", dir + "/hf", fs::copy_options::recursive);
  std::string config = nlohmann::json::parse(read(dir + "/hf/config.json")).dump();
  config.pop_back();  // the closing brace: rope_scaling goes in as the last key
  write(dir + "/hf/config.json", config + ",\"rope_scaling\":" + deep_json(100000) + "}");
  const CliResult r = bounded("import " + dir + "/hf --out " + dir + "/imported");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(dir + "/hf/config.json: JSON nested deeper than 64 levels"), npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/imported"));
}

TEST(CliInputs, ResumeDropsADeeplyNestedMetricsLine) {
  const std::string run = copy_of_run("fp8lm_inputs_deep_metrics");
  std::ofstream(run + "/metrics.jsonl", std::ios::app)
      << "{\"step\": 1, \"x\": " << deep_json(100000) << "}\n";
  const CliResult r = bounded("train --resume " + run);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read(run + "/metrics.jsonl").find("{\"a\":{\"a\":"), npos);
  EXPECT_TRUE(fs::exists(run + "/report.html"));
}

// D13: a named pipe where a file belongs blocked forever (an open for reading waits for a
// writer); each is refused at once, naming it.
TEST(CliInputs, ANamedPipeIsRefusedAtOnceByEveryCommand) {
  const std::string dir = fresh("fp8lm_inputs_fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directories(dir + "/hf");
  ASSERT_EQ(::mkfifo((dir + "/hf/config.json").c_str(), 0644), 0);
  write(dir + "/text.txt", "some text to tokenize\n");
  const struct {
    std::string args, names;
  } cases[] = {
      {"eval --checkpoint " + fifo, fifo},
      {"train --data " + fifo + " --steps 1 --out " + dir + "/out", "--data " + fifo},
      {"inspect " + fifo, fifo},
      {"logits --checkpoint " + fifo + " --tokens 1", fifo},
      {"export " + fifo + " " + dir + "/out", fifo},
      {"import " + dir + "/hf --out " + dir + "/out", dir + "/hf/config.json"},
      {"train --init " + fifo + " --steps 1 --out " + dir + "/out", fifo},
      {"tokenizer encode --tokenizer " + kTokenizer + " --file " + fifo, "--file " + fifo},
      {"tokenizer decode --tokenizer " + fifo + " 1", fifo},
      {"data prepare --tokenizer " + fifo + " --out " + dir + "/out " + dir + "/text.txt", fifo},
      {"data prepare --tokenizer " + kTokenizer + " --out " + dir + "/out " + fifo, fifo},
      {"tokenizer train --out " + dir + "/tok.json " + fifo, fifo},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const CliResult r = bounded(c.args);
    EXPECT_EQ(r.status, 1) << r.err;  // 124: it blocked until the timeout
    EXPECT_NE(r.err.find(c.names + ": is a named pipe, not a file"), npos) << r.err;
    EXPECT_FALSE(fs::exists(dir + "/out"));
    EXPECT_FALSE(fs::exists(dir + "/tok.json"));
  }
}

// D14: /dev/zero was read without bound (1-2 GB in seconds).
TEST(CliInputs, ADeviceIsRefusedAtOnce) {
  const std::string dir = fresh("fp8lm_inputs_zero");
  for (const std::string& args :
       {"tokenizer encode --tokenizer " + kTokenizer + " --file /dev/zero",
        "tokenizer train --out " + dir + "/tok.json /dev/zero"}) {
    SCOPED_TRACE(args);
    const CliResult r = bounded(args, kMemoryLimit);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("/dev/zero: is a device, not a file"), npos) << r.err;
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(CliInputs, ARunsFilesLinkedToADeviceAreRefusedAtOnce) {
  // latest: resume says why it cannot be used and takes the newest checkpoint.
  std::string run = copy_of_run("fp8lm_inputs_zero_latest");
  fs::remove(run + "/checkpoints/latest");
  fs::create_symlink("/dev/zero", run + "/checkpoints/latest");
  CliResult r = bounded("train --resume " + run, kMemoryLimit);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(run + "/checkpoints/latest: is a device, not a file"), npos) << r.out;
  for (const char* name : {"config.json", "metrics.jsonl"}) {
    SCOPED_TRACE(name);
    run = copy_of_run(std::string("fp8lm_inputs_zero_") + name);
    fs::remove(run + "/" + name);
    fs::create_symlink("/dev/zero", run + "/" + name);
    // A config.json as a user may have reformatted it: a run that rewrote it would show.
    if (fs::is_regular_file(run + "/config.json"))
      write(run + "/config.json", read_text(run + "/config.json") + "\n\n");
    const auto before = run_files(run);
    r = bounded("train --resume " + run, kMemoryLimit);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find(run + "/" + name + ": is a device, not a file"), npos) << r.err;
    // Read before anything is written: the run as it was.
    EXPECT_TRUE(run_files(run) == before);
  }
}

// D16: these read as "internal: basic_filebuf::underflow", "internal: [json.exception...]" or
// "internal: stoi".
TEST(CliInputs, ReadErrorsNameTheFileAndTheProblem) {
  const std::string dir = fresh("fp8lm_inputs_misc");
  CliResult r = bounded("tokenizer encode --tokenizer " + kTokenizer + " --file " + dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--file " + dir + ": is a directory, not a file"), npos) << r.err;

  write(dir + "/c.json", "{\"lr\": 1e400}");
  r = bounded("train --config " + dir + "/c.json --out " + dir + "/run");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--config " + dir + "/c.json: number overflow parsing '1e400'"), npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir + "/run"));

  // A tokenizer.json and a Hugging Face config.json with a field of the wrong type.
  auto tok = nlohmann::json::parse(read(kTokenizer));
  tok["model"]["type"] = 5;
  write(dir + "/tok.json", tok.dump());
  r = bounded("tokenizer encode --tokenizer " + dir + "/tok.json hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(dir + "/tok.json: model: \"type\" is 5, not a string"), npos) << r.err;
  fs::copy(FP8LM_SOURCE_DIR "/tests/data/hf/llama", dir + "/hf", fs::copy_options::recursive);
  auto config = nlohmann::json::parse(read(dir + "/hf/config.json"));
  config["num_key_value_heads"] = "two";
  write(dir + "/hf/config.json", config.dump());
  r = bounded("import " + dir + "/hf --out " + dir + "/imported");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("config.json 'num_key_value_heads' is \"two\", not an integer"), npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir + "/imported"));
}

TEST(CliInputs, AMetricsLineOfTheWrongTypesIsLeftOutOfTheReport) {
  const std::string run = copy_of_run("fp8lm_inputs_bad_metrics");
  std::ofstream(run + "/metrics.jsonl", std::ios::app)
      << R"({"step": 1, "block_scales": {"g": {"r": {"exponents": {"x": 1}}}}})"
      << "\n";
  const CliResult r = bounded("train --resume " + run);
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string report = read(run + "/report.html");
  EXPECT_NE(
      report.find(
          "1 lines of metrics.jsonl left out</b>, the first: " + run +
          "/metrics.jsonl line 3: block_scales g r: exponent 'x' is not one from -1100 to 1100"),
      npos);
}

// Found by fuzz_metrics: a step of 2.5e23 was converted to an integer (undefined behaviour);
// a step that is not a count leaves its line out, named on the page.
TEST(CliInputs, AStepThatIsNotACountIsLeftOutOfTheReport) {
  const std::string run = copy_of_run("fp8lm_inputs_huge_step");
  std::ofstream(run + "/metrics.jsonl", std::ios::app)
      << R"({"step": 2.5e23, "skipped": true, "loss": 1})"
      << "\n";
  write_report(run);
  const std::string report = read(run + "/report.html");
  const size_t at = report.find("1 lines of metrics.jsonl left out</b>, the first: " + run +
                                "/metrics.jsonl line 3: ");
  ASSERT_NE(at, npos) << report.substr(0, 2000);
  EXPECT_NE(report.find("is 2.5e+23, not an integer", at), npos) << report.substr(at, 300);
}

// D18: the reason, not just "cannot be read" / "cannot be written".
TEST(CliInputs, APermissionDeniedTokenizerNamesTheReason) {
  const std::string dir = fresh("fp8lm_inputs_denied");
  fs::copy_file(kTokenizer, dir + "/tok.json");
  fs::permissions(dir + "/tok.json", fs::perms::none);
  if (::access((dir + "/tok.json").c_str(), R_OK) == 0)
    GTEST_SKIP() << "this user (root?) reads a file of mode 000: no permission to deny";
  const CliResult r = bounded("tokenizer encode --tokenizer " + dir + "/tok.json hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(dir + "/tok.json: cannot be read: Permission denied"), npos) << r.err;
}

TEST(CliInputs, TokenizerTrainUnderAFileSizeLimitSaysWhyAndLeavesNothing) {
  const std::string dir = fresh("fp8lm_inputs_fsize");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox " + std::to_string(i) + " jumps\n";
  write(dir + "/text.txt", text);
  const CliResult r =
      bounded("tokenizer train --vocab-size 300 --out " + dir + "/tok.json " + dir + "/text.txt",
              "ulimit -f 4;");  // 4 KiB: the tokenizer.json is larger
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find(dir + "/tok.json: write failed: File too large"), npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/tok.json"));
  EXPECT_FALSE(fs::exists(dir + "/tok.json.tmp"));
}

}  // namespace
}  // namespace fp8lm
