// Issue 30: what data, tokenizers, model metadata and numbers hold is checked once where they are
// opened, so that a hostile or damaged input is one line naming it, before a step is trained,
// not a crash, a hang or a finished run thrown away.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "safetensors_edit.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;

const std::string kSmall =
    " --seq-len 16 --d-model 16 --n-layers 1 --n-heads 1 --ffn 32 --batch-size 2 --threads 1 "
    "--device cpu --steps 2";

// A token dataset of the test tokenizer (2000 tokens), a model trained on it, and copies of the
// dataset to damage.
class DataChecks : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::TempDir() + "fp8lm_data_checks_" + std::to_string(getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string text;
    for (int i = 0; i < 300; ++i) text += "the cat " + std::to_string(i % 13) + " sat on a mat.\n";
    write_text(dir_ + "/corpus.txt", text);
    ASSERT_EQ(fp8lm("data prepare " + dir_ + "/corpus.txt --split-lines --tokenizer " + kTok +
                    " --out " + dir_ + "/tokens")
                  .status,
              0);
    ASSERT_EQ(
        fp8lm("train --data " + dir_ + "/tokens" + kSmall + " --out " + dir_ + "/model").status, 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A copy of the dataset, for one test to damage.
  static std::string copy(const std::string& name) {
    const std::string to = dir_ + "/" + name;
    fs::remove_all(to);
    fs::copy(dir_ + "/tokens", to);
    return to;
  }
  // Two bytes 0xff 0xff, a token of id 65535, at token i of a shard.
  static void put_65535(const std::string& shard, int64_t i) {
    std::string b = read_text(shard);
    b[static_cast<size_t>(32 + 2 * i)] = '\xff';
    b[static_cast<size_t>(32 + 2 * i + 1)] = '\xff';
    write_text(shard, b);
  }

  static inline const std::string kTok = FP8LM_SOURCE_DIR "/tests/data/tokenizer/tokenizer.json";
  static std::string dir_;
};
std::string DataChecks::dir_;

// D1: eval ended with SIGSEGV (rc 139) on an id past the vocabulary in val.tok.
TEST_F(DataChecks, EvalOfAnIdPastTheVocabularyNamesItNotASegfault) {
  const std::string ds = copy("bad_val");
  put_65535(ds + "/val.tok", 0);
  const CliResult r = fp8lm("eval --checkpoint " + dir_ + "/model --data " + ds);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find(ds + "/val.tok: token 0 (byte offset 32) is id 65535, not below the "
                            "vocabulary size 2000"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
}

// D1: training crashed on such an id in a train shard (at once), or in val.tok (after every
// step, at validation). Both are refused before the first step, and no run is written.
TEST_F(DataChecks, TrainingOnAnIdPastTheVocabularyStopsBeforeStepOne) {
  for (const std::string shard : {"train-00000.tok", "val.tok"}) {
    const std::string ds = copy("bad_" + shard);
    put_65535(ds + "/" + shard, 5);
    const std::string out = dir_ + "/run_" + shard;
    const CliResult r = fp8lm("train --data " + ds + kSmall + " --out " + out);
    EXPECT_EQ(r.status, 1) << shard;
    EXPECT_NE(r.err.find(shard + ": token 5 (byte offset 42) is id 65535"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step trained: " << r.out;
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  }
}

// D7 and D22: a dataset without its tokenizer trained every step and then failed; a manifest's
// token_bytes 3 was accepted. Both fail before step 1, naming the file.
TEST_F(DataChecks, ADatasetWithoutItsTokenizerOrWithAnOddTokenSizeStopsBeforeStepOne) {
  std::string ds = copy("no_tokenizer");
  fs::remove(ds + "/tokenizer.json");
  CliResult r = fp8lm("train --data " + ds + kSmall + " --no-save");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("token dataset " + ds + ": its tokenizer: " + ds + "/tokenizer.json"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;
  ds = copy("three_bytes");
  std::string manifest = read_text(ds + "/manifest.json");
  manifest.replace(manifest.find("\"token_bytes\": 2"), 16, "\"token_bytes\": 3");
  write_text(ds + "/manifest.json", manifest);
  r = fp8lm("train --data " + ds + kSmall + " --no-save");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("token_bytes 3 is not a token size shards have (2 or 4)"), std::string::npos)
      << r.err;
}

// Found by fuzz_token_shards: a tokenizer name longer than a file name can be ended the
// process with std::filesystem's "File name too long"; the manifest names it instead.
TEST_F(DataChecks, AManifestNamingATokenizerTooLongForAFileNameIsRefusedByName) {
  const std::string ds = copy("long_tokenizer_name");
  std::string manifest = read_text(ds + "/manifest.json");
  const std::string name(300, 't');
  manifest.replace(manifest.find("\"tokenizer.json\""), 16, "\"" + name + "\"");
  write_text(ds + "/manifest.json", manifest);
  const CliResult r = fp8lm("train --data " + ds + kSmall + " --no-save");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'" + name + "' is not a file name in the dataset's directory"),
            std::string::npos)
      << r.err;
}

// D7: --vocab above the tokenizer's (padding, as GPT-2's 50257 to 50304) trained every step and
// then failed decoding the sample ("decode: 47605 is not a token id"). It is allowed, and what
// the model says past its tokenizer is written as the id.
TEST_F(DataChecks, AVocabularyPaddedPastTheTokenizerTrainsAndWritesItsSample) {
  const CliResult r =
      fp8lm("train --data " + dir_ + "/tokens" + kSmall + " --vocab 100000 --no-save");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("sample: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<|id "), std::string::npos) << "an untrained padded model says them";
}

// D7: --seq-len 1 left the sample no prompt and failed after the last step.
TEST_F(DataChecks, SeqLenOneForATextRunIsRefusedBeforeStepOne) {
  const CliResult r = fp8lm("train --data " + dir_ +
                            "/corpus.txt --seq-len 1 --d-model 16 "
                            "--n-layers 1 --n-heads 1 --steps 2 --threads 1 --no-save");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--seq-len 1 leaves the sample of a text run no prompt"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;
}

// D20: --eot an ordinary word, and a --val-fraction that leaves nothing to train on, were
// accepted. Both are refused and no directory is left.
TEST_F(DataChecks, PrepareRefusesAWordAsEndOfTextAndAnEmptyTrainSplit) {
  const auto before = listing(dir_);
  CliResult r = fp8lm("data prepare " + dir_ + "/corpus.txt --split-lines --tokenizer " + kTok +
                      " --out " + dir_ + "/eot_the --eot the");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--eot 'the' is an ordinary token of " + kTok), std::string::npos) << r.err;
  r = fp8lm("data prepare " + dir_ + "/corpus.txt --split-lines --tokenizer " + kTok + " --out " +
            dir_ + "/all_val --val-fraction 0.9999");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--val-fraction 0.9999 held out all 300 documents"), std::string::npos)
      << r.err;
  EXPECT_EQ(listing(dir_), before);
}

// D20: a tokenizer whose ids repeat was read, decoding to other text than it encoded.
TEST_F(DataChecks, ATokenizerWithARepeatedIdIsRefusedByName) {
  nlohmann::json j = nlohmann::json::parse(read_text(kTok));
  j["model"]["vocab"]["zzzz"] = 7;
  const std::string tok = dir_ + "/dup.json";
  write_text(tok, j.dump());
  const CliResult r = fp8lm("tokenizer encode --tokenizer " + tok + " hello");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(tok + ": tokens '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("' both have id 7"), std::string::npos) << r.err;
}

// D4: a negative exponent count in block_scales printed an unrelated string as the histogram
// (rc 0); an exponent key of 2e9 hung inspect. D20: --layer -5 was accepted.
TEST_F(DataChecks, InspectRefusesDamagedBlockScalesAndALayerOutsideTheModel) {
  const std::string run = dir_ + "/mx";
  ASSERT_EQ(fp8lm("train --precision fp8 --recipe mxfp8 --vocab 16 --seq-len 16 --d-model 32 "
                  "--n-layers 1 --n-heads 2 --steps 1 --threads 1 --out " +
                  run)
                .status,
            0);
  const std::vector<uint8_t> model = test::read_bytes(run + "/model.safetensors");
  const auto with_exponents = [&](const std::string& name, const nlohmann::json& exponents) {
    std::vector<uint8_t> bytes = model;
    nlohmann::json h = nlohmann::json::parse(test::header_of(bytes));
    nlohmann::json blocks =
        nlohmann::json::parse(h["__metadata__"]["block_scales"].get<std::string>());
    blocks["layers.0.fc1"]["weight"]["exponents"] = exponents;
    h["__metadata__"]["block_scales"] = blocks.dump();
    test::set_header(bytes, h.dump());
    test::reseal(bytes);  // the header's checksum made to match: the reader's own checks are tested
    const std::string path = dir_ + "/" + name;
    test::write_bytes(path, bytes);
    return path;
  };
  CliResult r = fp8lm("inspect " + with_exponents("neg.safetensors", {{"0", -5}}));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("block_scales layers.0.fc1 weight exponent 0 is -5, not an integer from 0"),
            std::string::npos)
      << r.err;
  r = fp8lm("inspect " + with_exponents("far.safetensors", {{"2000000000", 1}}), "", "timeout 20");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("exponent '2000000000' is not an integer from -158 to 135"),
            std::string::npos)
      << r.err;
  r = fp8lm("inspect " + run + " --layer -5");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--layer -5: the model's layers are 0 to 0"), std::string::npos) << r.err;
  EXPECT_EQ(fp8lm("inspect " + run + " --layer 0").status, 0);
}

// D17: values reported as something else: an HF size of 1e300 as -9223372036854775808, --lr
// 1e-50 as "--lr 0", --temperature inf as below 0.
TEST_F(DataChecks, ValuesAreReportedAsWritten) {
  fs::create_directories(dir_ + "/hf");
  write_text(dir_ + "/hf/config.json",
             R"({"model_type": "gpt2", "vocab_size": 256, "n_positions": 16, "n_embd": 1e300,
                  "n_layer": 1, "n_head": 1})");
  CliResult r = fp8lm("import " + dir_ + "/hf --out " + dir_ + "/imported");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("config.json 'n_embd' is 1e+300, not an integer from 0 to "
                       "9223372036854775807"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/imported"));
  r = fp8lm("train --lr 1e-50 --no-save");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--lr 1e-50 is below the smallest float"), std::string::npos) << r.err;
  r = fp8lm("generate --checkpoint " + dir_ + "/model --prompt hi --temperature inf");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--temperature inf is not a finite number"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp8lm
