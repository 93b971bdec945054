// Issue 30: the command line under hostile conditions, one regression test per defect the
// probe found in the run's own flow (the lock, the run's end, its output, the file system).
// Each asserts the exit status, the message, and what is (or is not) on disk.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli_util.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;

const std::string kTinyTrain = "train " + kTinyModel + " --steps 2";

// D5: the lock is taken before --out is checked, so a run started while another is still
// loading cannot find the directory empty and be overwritten by it afterwards.
TEST(Hostile, D5_ARunStartingInADirectoryAnotherHasClaimedIsRefused) {
  const std::string dir = fresh("d5") + "/r";
  // The first run's model takes over a second to build: on main it checked --out, then built
  // its model, and only then locked the directory and wrote into it.
  const std::string pid_file = fresh("d5_pid") + "/pid";
  ASSERT_EQ(std::system((std::string(FP8LM_BIN) + " train --d-model 1024 --n-layers 12 " +
                         "--steps 1 --threads 1 --out " + dir + " >/dev/null 2>&1 & echo $! > " +
                         pid_file)
                            .c_str()),
            0);
  for (int i = 0; i < 100 && !fs::exists(dir + "/.lock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const CliResult second = fp8lm(kTinyTrain + " --out " + dir);
  const pid_t first = std::stoi(read_text(pid_file));
  kill(first, SIGKILL);
  EXPECT_EQ(second.status, 1) << second.out;
  EXPECT_NE(second.err.find(dir + " is in use: another fp8lm process"), std::string::npos)
      << second.err;
  EXPECT_FALSE(fs::exists(dir + "/summary.json"));  // the second run wrote nothing
}

// D5, the other half: a run that fails to start undoes its claim on a directory it made.
TEST(Hostile, D5_ARunThatFailsToStartLeavesNoDirectory) {
  const std::string dir = fresh("d5_fail");
  write_text(dir + "/short.txt", "abc");
  const CliResult r = fp8lm("train --data " + dir + "/short.txt --steps 2 --out " + dir + "/r");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("short.txt: 3 bytes is too short"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/r"));
}

// D8: a run whose last steps were skipped did not end well: it says why, its summary says so,
// and it exits non-zero; the model it ended with is kept (to look at), not passed off as good.
TEST(Hostile, D8_ARunEndingOnSkippedStepsFails) {
  const std::string dir = fresh("d8") + "/r";
  const CliResult r = fp8lm("train --precision fp8 --lr 3e38 --grad-clip 0 --steps 5 " +
                            kTinyModel + " --out " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("error: the run did not end well: the last 4 of 5 steps were skipped"),
            std::string::npos)
      << r.err;
  const auto summary = nlohmann::json::parse(read_text(dir + "/summary.json"));
  EXPECT_EQ(summary["ok"], false);
  EXPECT_NE(summary["failure"].get<std::string>().find("the last 4 of 5 steps were skipped"),
            std::string::npos);
  EXPECT_TRUE(summary["final_loss"].is_null()) << summary.dump();  // not step 1's loss
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  // And the model it wrote measures as broken, not as a loss of NaN with success.
  const CliResult eval = fp8lm("eval --checkpoint " + dir);
  EXPECT_EQ(eval.status, 1) << eval.out;
  EXPECT_NE(eval.err.find("model.safetensors: the loss is"), std::string::npos) << eval.err;
  EXPECT_NE(eval.err.find("the model's outputs are not finite"), std::string::npos) << eval.err;
}

TEST(Hostile, D8_ARunThatEndsWellSaysOk) {
  const std::string dir = fresh("d8_ok") + "/r";
  ASSERT_EQ(fp8lm(kTinyTrain + " --out " + dir).status, 0);
  const auto summary = nlohmann::json::parse(read_text(dir + "/summary.json"));
  EXPECT_EQ(summary["ok"], true);
  EXPECT_FALSE(summary.contains("failure"));
}

// D9: output that cannot be written is a failure, whichever command writes it.
TEST(Hostile, D9_AFullStdoutFailsEveryCommand) {
  const std::string dir = fresh("d9");
  ASSERT_EQ(fp8lm(kTinyTrain + " --out " + dir + "/r").status, 0);
  const std::string model = dir + "/r/model.safetensors";
  for (const std::string& command :
       {"eval --checkpoint " + model,
        "generate --checkpoint " + model + " --prompt \"1 2 3\" --max-new-tokens 4",
        "inspect " + model, std::string("doctor"), std::string("fp8 table --format e4m3"),
        "logits --checkpoint " + model + " --tokens \"1 2 3\"", kTinyTrain + " --no-save"}) {
    const CliResult r = fp8lm(command + " >/dev/full");
    EXPECT_EQ(r.status, 1) << command;
    EXPECT_EQ(lines(r.err).back(), "error: cannot write the output: No space left on device")
        << command << ": " << r.err;
    EXPECT_EQ(r.err.find("internal"), std::string::npos) << command << ": " << r.err;
  }
}

// D16: directories that cannot be made or written are the user's condition, named by path
// and reason, never "internal: filesystem error".
TEST(Hostile, D16_AnOutThatCannotBeWrittenIsNamed) {
  const std::string dir = fresh("d16");
  fs::create_symlink(dir + "/nowhere", dir + "/dangling");
  struct Case {
    std::string out, says;
  };
  std::vector<Case> cases = {
      {"/dev/full/x", "--out /dev/full/x: cannot create the directory: Not a directory"},
      {dir + "/dangling", "--out " + dir + "/dangling: a link to nothing (dangling symlink)"}};
  if (geteuid() != 0) {  // root writes anywhere: a read-only directory stops no one
    fs::create_directory(dir + "/ro");
    chmod((dir + "/ro").c_str(), 0555);
    cases.push_back({dir + "/ro/r", "cannot create the directory: Permission denied"});
  }
  for (const Case& c : cases) {
    const CliResult r = fp8lm(kTinyTrain + " --out " + c.out);
    EXPECT_EQ(r.status, 1) << c.out;
    ASSERT_EQ(lines(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir + "/nowhere"));
}

// D16: a checkpoint that cannot be written (checkpoints/ is a file here: a condition root
// meets too) names the file and the reason.
TEST(Hostile, D16_ACheckpointThatCannotBeWrittenIsNamed) {
  const std::string dir = fresh("d16_ckpt") + "/r";
  ASSERT_EQ(fp8lm(kTinyTrain + " --stop-after 1 --out " + dir).status, 0);
  fs::remove_all(dir + "/checkpoints");
  write_text(dir + "/checkpoints", "not a directory");
  const CliResult r = fp8lm("train --resume " + dir);
  EXPECT_EQ(r.status, 1);
  ASSERT_FALSE(r.err.empty());
  EXPECT_NE(lines(r.err).back().find(dir + "/checkpoints"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Not a directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir + "/checkpoints"), "not a directory");
}

// D19: text given to eval for a model of the stride task's ids is refused, not measured.
TEST(Hostile, D19_TextForAStrideModelIsRefused) {
  const std::string dir = fresh("d19");
  ASSERT_EQ(fp8lm(kTinyTrain + " --out " + dir + "/r").status, 0);
  std::string text;
  for (int i = 0; i < 100; ++i) text += "some text a user has lying around. ";
  write_text(dir + "/text.txt", text);
  const CliResult r = fp8lm("eval --checkpoint " + dir + "/r --data " + dir + "/text.txt");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("this model was trained on the stride task, not text"), std::string::npos)
      << r.err;
}

// D20: values that were accepted silently, each refused with its flag named and nothing
// written.
TEST(Hostile, D20_NonsenseValuesAreRefused) {
  const std::string dir = fresh("d20");
  write_text(dir + "/null.json", R"({"data": null})");
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"train --threads 10000", "--threads 10000 is more than the"},
           {"--config ''", "--config was given an empty value; give a FILE"},
           {"--init ''", "--init was given an empty value; give a MODEL"},
           {"--data ''", "--data was given an empty value; give a PATH"},
           {"--config null.json", "null.json: 'data' must be a number, a string or true/false"},
           {"--seed -1", "--seed -1 must be 0 or more"},
           {"--precision bf16 --recipe nvfp4", "--recipe nvfp4 is an FP8 setting"},
           {"--precision fp32 --precision-map first-last-layers",
            "--precision-map first-last-layers is an FP8 setting"}}) {
    const std::string command = flags.starts_with("train") ? flags : kTinyTrain + " " + flags;
    const CliResult r = fp8lm(command + " --out r", "", "cd " + dir + " &&");
    EXPECT_EQ(r.status, 1) << flags;
    ASSERT_EQ(lines(r.err).size(), 1u) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << flags << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir + "/r")) << flags;
  }
  EXPECT_EQ(fp8lm("inspect ''").err, "error: target was given an empty value; give a MODEL\n");
}

// D20: --stop-after at or below the step a run is at would train one more step and stop:
// refused, with the run's checkpoints as they were.
TEST(Hostile, D20_StopAfterAStepAlreadyPastIsRefused) {
  const std::string dir = fresh("d20_stop") + "/r";
  ASSERT_EQ(fp8lm("train " + kTinyModel + " --steps 4 --stop-after 3 --out " + dir).status, 0);
  const auto before = run_files(dir);
  const CliResult r = fp8lm("train --resume " + dir + " --stop-after 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--stop-after 2: the run is already at step 3; give a later step"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(run_files(dir) == before);
}

// D17: a value holding a NUL (or any control byte) is quoted whole, escaped, on one line.
TEST(Hostile, D17_AControlByteInAValueIsEscapedNotATruncation) {
  const std::string dir = fresh("d17_nul");
  write_text(dir + "/nul.json", R"({"recipe": "mx\u0000fp8\nmore"})");
  const CliResult r = fp8lm(kTinyTrain + " --config nul.json --out r", "", "cd " + dir + " &&");
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("mx\\x00fp8\\x0amore"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/r"));
}

// D16: an imported model of a huge context (max_position_embeddings 10^15) generated with
// "std::bad_alloc": its KV cache was sized by the position table, not by the generation.
TEST(Hostile, D16_AHugeContextGeneratesInTheMemoryOfItsTokens) {
  const std::string dir = fresh("d16_context");
  ASSERT_EQ(fp8lm("train --steps 1 --d-model 16 --n-layers 1 --n-heads 1 --ffn 16 --threads 1 "
                  "--rope-theta 10000 --normalization rmsnorm --activation swiglu --no-bias "
                  "--no-tie-embeddings --out " +
                  dir + "/r")
                .status,
            0);
  ASSERT_EQ(fp8lm("export " + dir + "/r --out " + dir + "/hf").status, 0);
  auto config = nlohmann::json::parse(read_text(dir + "/hf/config.json"));
  config["max_position_embeddings"] = 1000000000000000;
  write_text(dir + "/hf/config.json", config.dump());
  ASSERT_EQ(fp8lm("import " + dir + "/hf --out " + dir + "/m").status, 0);
  const CliResult r =
      fp8lm("generate --checkpoint " + dir + "/m --prompt \"1 2 3\" --max-new-tokens 2", "",
            kMemoryLimit);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
}

}  // namespace
}  // namespace fp8lm
