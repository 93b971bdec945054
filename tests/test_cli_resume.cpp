// Issue 30: what a resume checks before it continues a run (its own checkpoints only, the data
// it trained on, what a checkpoint's checksums cover), and how a command taking a MODEL finds
// the model of a run that has not finished.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "safetensors_edit.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;

// Three steps, a checkpoint after each, stopped after the second: a run to resume.
const std::string kStopped =
    "train --steps 3 --checkpoint-every 1 --stop-after 2 " + kTinyModel + " --out ";

// A path under the test temp dir with nothing there (a run's --out, a data file).
std::string unused_path(const std::string& name) {
  const std::string path = testing::TempDir() + "fp8lm_cli_resume_" + name;
  fs::remove_all(path);
  return path;
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(std::ifstream(path));
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2) << "\n";
}

std::string run_id(const std::string& run) {
  return read_json(run + "/config.json")["run"]["id"].get<std::string>();
}

// Expects `train --resume run` to fail with one error line holding `needle`, the run left as it
// was.
void expect_resume_refused(const std::string& run, const std::string& needle,
                           const std::string& flags = "") {
  const auto before = run_files(run);
  const CliResult r = fp8lm("train --resume " + run + flags);
  EXPECT_EQ(r.status, 1) << r.out;
  // One error line (after any warning about an older run).
  const std::vector<std::string> err = lines(r.err);
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(std::count_if(err.begin(), err.end(),
                          [](const std::string& l) { return !l.starts_with("warning: "); }),
            1)
      << r.err;
  EXPECT_NE(err.back().find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal"), std::string::npos) << r.err;
  EXPECT_TRUE(run_files(run) == before) << "the run's files changed";
}

// Issue 30 (D11): another run's checkpoint copied or linked into checkpoints/ was resumed,
// going on with the other's d_model and rewriting config.json. Each run has an id, in its
// config.json and in every checkpoint; a checkpoint of another id, a link, or (for runs written
// before ids) one of another config is refused by name.
TEST(CliResume, AnotherRunsCheckpointIsRefused) {
  const std::string a = unused_path("own"), b = unused_path("other");
  ASSERT_EQ(fp8lm(kStopped + a).status, 0);
  std::string wider = kStopped + b;
  wider.replace(wider.find("--d-model 32"), 12, "--d-model 64");
  ASSERT_EQ(fp8lm(wider).status, 0);
  const std::string copied = a + "/checkpoints/step-000009";
  std::ofstream(a + "/checkpoints/latest") << "step-000009\n";

  fs::copy(b + "/checkpoints/step-000002", copied);
  expect_resume_refused(a, copied + ": a checkpoint of another run (run id " + run_id(b) +
                               "; this run's is " + run_id(a) + "); remove it to resume");

  fs::remove_all(copied);
  fs::create_directory_symlink(fs::absolute(b + "/checkpoints/step-000002"), copied);
  expect_resume_refused(a, copied + ": a symbolic link (to ");

  // A run from before ids, and a copied checkpoint without one: its config tells it apart.
  fs::remove(copied);
  fs::copy(b + "/checkpoints/step-000002", copied);
  for (const char* file : {"/model.safetensors", "/train_state.safetensors"})
    test::set_metadata(copied + file, "run_id", std::nullopt);
  nlohmann::json config = read_json(a + "/config.json");
  config["run"].erase("id");
  write_json(a + "/config.json", config);
  expect_resume_refused(
      a, copied + ": not this run's checkpoint: its d_model is 64, the run's config.json says 32");

  // Its own checkpoint, written before ids: resumed, with a warning, and given an id.
  fs::remove_all(copied);
  std::ofstream(a + "/checkpoints/latest") << "step-000002\n";
  for (const char* file : {"/model.safetensors", "/train_state.safetensors"})
    test::set_metadata(a + "/checkpoints/step-000002" + file, "run_id", std::nullopt);
  const CliResult r = fp8lm("train --resume " + a);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + a + ": written by an fp8lm before run ids"), std::string::npos)
      << r.err;
  EXPECT_EQ(run_id(a).size(), 32u);
  EXPECT_EQ(test::read_bytes(a + "/model.safetensors").empty(), false);
}

// Issue 30 (D12): the data a run trained on is fingerprinted (size, modification time, a hash
// of its ends); a resume on data that changed or is gone stops with a line naming it (it said
// "no checkpoint to resume from" for missing data), unless --allow-data-change says to go on.
TEST(CliResume, ChangedOrMissingDataIsNamed) {
  const std::string run = unused_path("data"), text = unused_path("data.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "plain text to learn from, line " << i << ".\n";
  }
  ASSERT_EQ(fp8lm("train --data " + text +
                  " --steps 3 --checkpoint-every 1 --stop-after 1 --seq-len 12 --d-model 32 "
                  "--n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 --threads 2 --device cpu "
                  "--out " +
                  run)
                .status,
            0);
  const nlohmann::json recorded = read_json(run + "/config.json")["run"]["data"];
  EXPECT_EQ(recorded["path"], fs::absolute(text).string());
  EXPECT_TRUE(recorded.contains("xxh3_ends"));

  std::ofstream(text, std::ios::app) << "a line added since.\n";
  expect_resume_refused(run, "the training data " + fs::absolute(text).string() +
                                 " changed since the run recorded it (size ");
  const CliResult r = fp8lm("train --resume " + run + " --allow-data-change --stop-after 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: resuming on " + fs::absolute(text).string() + " as it is now"),
            std::string::npos)
      << r.err;
  // The change is the run's data now: the next resume goes on without the flag.
  EXPECT_NE(read_json(run + "/config.json")["run"]["data"], recorded);

  fs::remove(text);
  expect_resume_refused(run,
                        "the run's training data " + fs::absolute(text).string() + " is missing");
  EXPECT_EQ(fp8lm("train --allow-data-change " + kTinyModel + " --no-save").status, 1);
}

// Issue 30 (D12): a token dataset prepared again with another tokenizer is other data.
TEST(CliResume, ADatasetPreparedWithAnotherTokenizerIsNamed) {
  const std::string dir = unused_path("dataset");
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/a.txt");
    for (int i = 0; i < 300; ++i) f << "line " << i << ": the quick fox, " << i * 7 << "\n";
  }
  const auto prepare = [&](int vocab) {
    fs::remove(dir + "/tok.json");
    ASSERT_EQ(fp8lm("tokenizer train --vocab-size " + std::to_string(vocab) + " --out " + dir +
                    "/tok.json " + dir + "/a.txt")
                  .status,
              0);
    fs::remove_all(dir + "/ds");
    ASSERT_EQ(fp8lm("data prepare --tokenizer " + dir + "/tok.json --out " + dir +
                    "/ds --split-lines --val-fraction 0.1 " + dir + "/a.txt")
                  .status,
              0);
  };
  prepare(300);
  ASSERT_EQ(fp8lm("train --data " + dir +
                  "/ds --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 "
                  "--batch-size 4 --threads 2 --device cpu --steps 3 --stop-after 1 --out " +
                  dir + "/run")
                .status,
            0);
  prepare(280);
  expect_resume_refused(dir + "/run", "the training data " + fs::absolute(dir + "/ds").string() +
                                          " changed since the run recorded it (its "
                                          "manifest.json, its tokenizer)");
}

// Issue 30 (D10): the repro: a model file of this version with its checksum list deleted and a
// bit flipped in wte was evaluated, rc 0.
TEST(CliResume, AModelWithoutItsChecksumListIsRefused) {
  const std::string run = unused_path("unsealed");
  ASSERT_EQ(fp8lm("train --steps 2 " + kTinyModel + " --out " + run).status, 0);
  const std::string model = run + "/model.safetensors";
  std::vector<uint8_t> bytes = test::read_bytes(model);
  bytes[test::data_offset(bytes, "wte") + 5] ^= 0x20;
  test::write_bytes(model, bytes);
  test::set_metadata(model, "xxh3_64", std::nullopt, test::Seal::Break);
  const CliResult r = fp8lm("eval --checkpoint " + run);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "error: " + model +
                       ": its checksum list (metadata 'xxh3_64') is missing: the file was "
                       "changed after fp8lm wrote it\n");
}

// Issue 30 (D21): export and logits of a run still training or stopped failed ("cannot open")
// while inspect took its latest checkpoint; every command taking a MODEL now finds it alike,
// and says which file it used.
TEST(CliResume, AStoppedRunsModelIsItsLatestCheckpoint) {
  const std::string run = unused_path("model_of");
  fs::remove_all(run + "_hf");
  ASSERT_EQ(fp8lm(kStopped + run).status, 0);
  const std::string note = "using " + run + "/checkpoints/step-000002/model.safetensors: " + run +
                           " has no model.safetensors yet (a run still training or stopped)\n";
  for (const std::string& command :
       {"eval --checkpoint " + run, "logits --tokens '1 2 3' --checkpoint " + run, "inspect " + run,
        "generate --max-new-tokens 2 --prompt '1 2' --checkpoint " + run,
        "export " + run + " --out " + run + "_hf"}) {
    SCOPED_TRACE(command);
    const CliResult r = fp8lm(command);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err.rfind(note, 0), 0u) << r.err;  // first (generate may remark on the prompt)
  }
  // `latest` lost (a run killed as it moved): the newest checkpoint there is.
  fs::remove(run + "/checkpoints/latest");
  const CliResult r = fp8lm("eval --checkpoint " + run);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, note);
}

}  // namespace
}  // namespace fp8lm
