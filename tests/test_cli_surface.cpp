// The command line as a newcomer meets it (issue 29): no input quietly read as something else,
// nothing thrown away, one way to name things, one table of settings behind flags, config
// files, help and the reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "train/settings.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;

const std::string kTrain = "train " + kTinyModel + " --steps 3";

TEST(Surface, AnFp8OnlySettingWithoutFp8IsRefusedByName) {
  const std::string dir = fresh("fp8_only");
  for (const auto& [flags, named] : std::vector<std::pair<std::string, std::string>>{
           {"--recipe mxfp8", "--recipe mxfp8 is an FP8 setting"},
           {"--recipe nvfp4 --precision bf16", "but the precision is bf16"},
           {"--fp8-format e4m3", "--fp8-format e4m3 is an FP8 setting"},
           {"--fp8-weights", "--fp8-weights is an FP8 setting"},
           {"--margin 2", "--margin 2 is an FP8 setting"},
           {"--no-power-2-scale", "--no-power-2-scale is an FP8 setting"},
           {"--disable-rht", "--disable-rht is an FP8 setting"},
           {"--precision-map first-last-layers", "--precision-map first-last-layers is an FP8"}}) {
    const CliResult r = fp8lm(kTrain + " " + flags, "", "cd " + dir + " &&");
    EXPECT_EQ(r.status, 1) << flags;
    EXPECT_NE(r.err.find(named), std::string::npos) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("add --precision fp8"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(listing(dir).empty());  // a refused run writes nothing
  // With FP8 the same flags train.
  const CliResult ok =
      fp8lm(kTrain + " --no-save --precision fp8 --recipe mxfp8 --fp8-format e4m3 --margin 2");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("recipe: mxfp8 e4m3"), std::string::npos) << ok.out;
}

TEST(Surface, TrainWithoutOutSavesTheRunAndNoSaveKeepsNothing) {
  const std::string dir = fresh("default_out");
  CliResult r = fp8lm(kTrain, "", "cd " + dir + " &&");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(fs::is_directory(dir + "/runs"));
  const auto runs = listing(dir + "/runs");
  const std::string run = fs::directory_iterator(dir + "/runs")->path().string();
  EXPECT_TRUE(fs::is_regular_file(run + "/model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(run + "/config.json"));
  const std::string name = "runs/" + fs::path(run).filename().string();
  EXPECT_NE(r.out.find("saving the run to " + name), std::string::npos) << r.out;  // at the start
  EXPECT_NE(r.out.find("wrote " + name + "/summary.json"), std::string::npos) << r.out;  // end
  // A second run in the same second gets its own directory.
  r = fp8lm(kTrain, "", "cd " + dir + " &&");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/runs"), {}), 2);

  const std::string quiet = fresh("no_save");
  r = fp8lm(kTrain + " --no-save", "", "cd " + quiet + " &&");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(listing(quiet).empty());
  r = fp8lm(kTrain + " --no-save --out x", "", "cd " + quiet + " &&");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--no-save keeps nothing; drop --out"), std::string::npos) << r.err;
  EXPECT_TRUE(listing(quiet).empty());
}

TEST(Surface, ARunsConfigIsReusableAndAnUnknownKeyNamesTheClosest) {
  const std::string dir = fresh("config_reuse");
  CliResult r = fp8lm(kTrain + " --no-bias --lr 0.003 --checkpoint-every 2 --out " + dir + "/a");
  ASSERT_EQ(r.status, 0) << r.err;
  r = fp8lm("train --config " + dir + "/a/config.json --out " + dir + "/b");
  ASSERT_EQ(r.status, 0) << r.err;
  // The same run again: the same config (checkpointing included) and the same losses, under a
  // run id of its own.
  nlohmann::json a = nlohmann::json::parse(read_text(dir + "/a/config.json"));
  nlohmann::json b = nlohmann::json::parse(read_text(dir + "/b/config.json"));
  EXPECT_NE(a["run"]["id"], b["run"]["id"]);
  a["run"].erase("id");
  b["run"].erase("id");
  EXPECT_EQ(a, b);
  EXPECT_EQ(nlohmann::json::parse(read_text(dir + "/a/summary.json"))["final_loss"],
            nlohmann::json::parse(read_text(dir + "/b/summary.json"))["final_loss"]);
  // Keys are the flags' names with underscores; a typo names the closest, as it is spelt there.
  write_text(dir + "/typo.json", R"({"d_modle": 64})");
  r = fp8lm("train --config " + dir + "/typo.json --no-save");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "error: " + dir + "/typo.json: unknown setting 'd_modle' (did you mean 'd_model'?)\n");
  write_text(dir + "/bad.json", R"({"steps": "many"})");
  r = fp8lm("train --config " + dir + "/bad.json --no-save");
  EXPECT_NE(r.err.find("bad.json: steps 'many' is not an integer"), std::string::npos) << r.err;
}

TEST(Surface, BooleansAreSwitchesWithNoForms) {
  CliResult r = fp8lm(kTrain + " --no-save --no-bias --no-tie-embeddings");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no biases · untied head"), std::string::npos) << r.out;
  r = fp8lm(kTrain + " --no-save --bias false");  // the old spelling, still read
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no biases"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("note: --bias false is an old spelling; write --no-bias"), std::string::npos)
      << r.err;
  r = fp8lm(kTrain + " --no-save --bias --no-bias");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--bias and --no-bias contradict each other"), std::string::npos) << r.err;
}

TEST(Surface, UnknownNamesGetTheClosestOne) {
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {"train --precison fp8",
            "error: unknown option '--precison' (did you mean --precision?) (see fp8lm train "
            "--help)\n"},
           {"trian", "error: unknown command 'trian' (did you mean train?) (see fp8lm --help)\n"},
           {"fp8 tabel",
            "error: unknown command 'tabel' (did you mean table?) (see fp8lm fp8 --help)\n"},
           {"generate --checkpont m --prompt 1",
            "error: unknown option '--checkpont' (did you mean --checkpoint?) (see fp8lm "
            "generate --help)\n"}}) {
    const CliResult r = fp8lm(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err, said) << args;
  }
}

TEST(Surface, HelpShowsEveryTypeAndDefaultFromTheSettingsTable) {
  const CliResult r = fp8lm("train --help");
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--steps INT=120"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--precision {auto,fp8,bf16,fp32}=auto"), std::string::npos);
  EXPECT_NE(r.out.find("(default: on; --no-bias turns it off)"), std::string::npos);
  for (const Setting& s : train_settings()) {
    EXPECT_NE(r.out.find(s.flag()), std::string::npos) << s.flag();
    // Each default is what a TrainConfig starts with, and its JSON key reads it back.
    TrainConfig c;
    apply_setting(c, s, s.fallback());
    EXPECT_EQ(s.get(c), s.get(TrainConfig{})) << s.name;
  }
  EXPECT_EQ(fp8lm("--version").out, "fp8lm " FP8LM_VERSION "\n");
}

TEST(Surface, TheCliReferenceIsCurrent) {
  const CliResult r = fp8lm("cli-reference");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, read_text(FP8LM_SOURCE_DIR "/docs/reference/cli.md"))
      << "docs/reference/cli.md is stale: cmake --build build/release --target cli-reference";
  EXPECT_NE(r.out.find("| `--d-model` | INT | 256 | model width |"), std::string::npos);
}

TEST(Surface, SettingsJsonRoundTripsAndReadsTheOlderNestedForm) {
  TrainConfig c;
  for (const Setting& s : train_settings()) {
    if (s.name == "data") continue;  // made absolute
    const std::string v = s.type == SettingType::Bool ? (s.fallback() == "true" ? "false" : "true")
                          : s.type == SettingType::Choice ? std::string(s.choices.back())
                          : s.type == SettingType::Text   ? "layers.0.*"
                                                          : "3";
    apply_setting(c, s, v);
  }
  TrainConfig back;
  apply_settings_json(back, settings_json(c), "here");
  EXPECT_EQ(settings_json(back), settings_json(c));
  // Files written before the flat form: model and recipe nested, two keys by other names.
  TrainConfig old;
  apply_settings_json(old, nlohmann::json::parse(R"({"precision": "fp8", "steps": 7,
      "bf16_grad_reduce": true, "fp8_fallback": false,
      "model": {"d_model": 64, "tied_head": false, "activation": "swiglu"},
      "recipe": {"kind": "mxfp8", "fp8_format": "e4m3", "margin": 1}})"),
                      "old.json");
  EXPECT_EQ(old.model.d_model, 64);
  EXPECT_FALSE(old.model.tied_head);
  EXPECT_EQ(old.model.activation, Activation::Swiglu);
  EXPECT_EQ(old.recipe.kind, ScalingKind::Mxfp8);
  EXPECT_EQ(old.recipe.delayed.format, Format::E4M3);
  EXPECT_EQ(old.recipe.delayed.margin, 1);
  EXPECT_TRUE(old.bf16_grad_reduce);
  EXPECT_FALSE(old.fp8_fallback);
  EXPECT_EQ(old.steps, 7);
}

// A model of a token dataset, and a byte-level one, with a text file and a dataset each.
class EvalData : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Its own directory per process: ctest runs each test of the suite as a process, side by side.
    dir_ = fresh("eval_data_" + std::to_string(getpid()));
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "the quick brown fox " + std::to_string(i % 17) + " jumps over the lazy dog.\n";
    write_text(dir_ + "/corpus.txt", text);
    const std::string tok = FP8LM_SOURCE_DIR "/tests/data/tokenizer/tokenizer.json";
    ASSERT_EQ(fp8lm("data prepare " + dir_ + "/corpus.txt --split-lines --tokenizer " + tok +
                    " --out " + dir_ + "/tokens")
                  .status,
              0);
    const std::string small =
        " --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 --threads 2 "
        "--device cpu --steps 2";
    ASSERT_EQ(fp8lm("train --data " + dir_ + "/tokens" + small + " --out " + dir_ + "/bpe").status,
              0);
    ASSERT_EQ(
        fp8lm("train --data " + dir_ + "/corpus.txt" + small + " --out " + dir_ + "/bytes").status,
        0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string dir_;
};
std::string EvalData::dir_;

TEST_F(EvalData, ATextFileIsReadThroughTheModelsTokenizerNotAsBytes) {
  // The defect: the file's raw bytes were read as token ids, a loss printed, exit 0.
  const CliResult r =
      fp8lm("eval --checkpoint " + dir_ + "/bpe --data " + dir_ + "/corpus.txt --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["data"].get<std::string>().find("tokenized by " + dir_ + "/tokens/"),
            std::string::npos)
      << r.out;
  // The held-out text read the same way twice gives the same loss; a run directory serves.
  const CliResult again = fp8lm("eval --checkpoint " + dir_ + "/bpe/model.safetensors --data " +
                                dir_ + "/corpus.txt --json");
  EXPECT_EQ(nlohmann::json::parse(again.out)["loss"], j["loss"]);
}

TEST_F(EvalData, AByteModelOnATokenDatasetIsRefused) {
  const auto before = listing(dir_);
  const CliResult r = fp8lm("eval --checkpoint " + dir_ + "/bytes --data " + dir_ + "/tokens");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is a token dataset, but this model reads bytes"), std::string::npos)
      << r.err;
  EXPECT_EQ(listing(dir_), before);
}

TEST_F(EvalData, ADatasetOfAnotherTokenizerIsRefused) {
  ASSERT_EQ(fp8lm("tokenizer train --vocab-size 280 --out " + dir_ + "/other.json " + dir_ +
                  "/corpus.txt")
                .status,
            0);
  ASSERT_EQ(fp8lm("data prepare " + dir_ + "/corpus.txt --split-lines --tokenizer " + dir_ +
                  "/other.json --out " + dir_ + "/other")
                .status,
            0);
  const CliResult r = fp8lm("eval --checkpoint " + dir_ + "/bpe --data " + dir_ + "/other");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(dir_ + "/other was made with another tokenizer than this model's"),
            std::string::npos)
      << r.err;
}

TEST_F(EvalData, FineTuningOnDataTheModelWouldMisreadIsRefused) {
  const std::string out = dir_ + "/tuned";
  CliResult r =
      fp8lm("train --steps 1 --init " + dir_ + "/bpe --data " + dir_ + "/corpus.txt --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(
      r.err.find("reads a tokenizer's ids, and " + dir_ + "/corpus.txt would be read as bytes"),
      std::string::npos)
      << r.err;
  r = fp8lm("train --steps 1 --init " + dir_ + "/bytes --data " + dir_ + "/tokens --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is a token dataset, but --init " + dir_ + "/bytes reads bytes"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
  // The model's own kind of data fine-tunes.
  r = fp8lm("train --steps 1 --threads 2 --batch-size 4 --init " + dir_ + "/bpe --data " + dir_ +
            "/tokens --no-save");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(EvalData, GenerateTakesARunDirectoryAndWarnsOfAShortStridePrompt) {
  const std::string run = fresh("stride_run") + "/r";
  ASSERT_EQ(fp8lm(kTrain + " --out " + run).status, 0);
  CliResult r = fp8lm("generate --checkpoint " + run + " --prompt \"3 5 7\" --max-new-tokens 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: this stride model learned to continue 8-token prompts; a "
                       "3-token one may not keep its stride"),
            std::string::npos)
      << r.err;
  r = fp8lm("generate --checkpoint " + run + " --prompt \"1 2 3 4 5 6 7 8\" --max-new-tokens 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // A seed without sampling would change nothing: said, not ignored.
  r = fp8lm("generate --checkpoint " + run + " --prompt \"1 2 3 4 5 6 7 8\" --seed 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "error: --seed picks the samples of sampled generation; give a --temperature above "
            "0\n");
}

}  // namespace
}  // namespace fp8lm
