// Hugging Face interchange: directories written by `export` and checked by transformers
// (tests/data/hf, made by tools/hf_check.py make: a tiny GPT-2 and a tiny Llama with grouped
// queries and an untied head, with transformers' logits) import into models whose logits equal
// those; export then import gives back every weight bit for bit; and what cannot be read or
// written is refused in one line naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/bf16.h"
#include "fp8lm/error.h"
#include "io/hf_interchange.h"
#include "nn/autocast.h"
#include "test_util.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kData = FP8LM_TEST_DATA "/hf";

std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + "fp8lm_hf_" + name;
  fs::remove_all(dir);
  return dir;
}

TEST(HfInterchange, FixturesImportWithTransformersLogits) {
  for (const char* arch : {"gpt2", "llama"}) {
    SCOPED_TRACE(arch);
    const HfModel m = import_hf(kData + "/" + arch);
    std::ifstream in(kData + "/" + arch + "/expected.json");
    const Json want = Json::parse(in);
    const auto tokens = want["tokens"].get<std::vector<int32_t>>();
    const auto T = static_cast<int64_t>(tokens.size());
    const GemmPrecision fp32(Precision::Fp32);
    m.model->forward(tokens.data(), nullptr, 1, T);
    const int64_t V = m.config.model.vocab;
    // Both sides in FP32, summed in different orders: a few roundings of the logits' scale
    // (tools/hf_check.py states the bound).
    double scale = 1, worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v) {
        const double theirs = want["logits"][t][v].get<double>();
        scale = std::max(scale, std::fabs(theirs));
        worst = std::max(worst, std::fabs(m.model->logits()[t * V + v] - theirs));
      }
    EXPECT_LE(worst, 1e-4 * scale);
  }
  EXPECT_EQ(import_hf(kData + "/llama").config.model.kv_heads(), 2);
  EXPECT_FALSE(import_hf(kData + "/llama").config.model.tied_head);
}

GPTConfig llama_config() {
  return {.vocab = 40,
          .seq_len = 16,
          .d_model = 32,
          .n_layers = 2,
          .n_heads = 4,
          .ffn = 24,
          .activation = Activation::Swiglu,
          .normalization = Normalization::RMSNorm,
          .n_kv_heads = 2,
          .rope_theta = 500000,
          .bias = false,
          .tied_head = false};
}

// Every parameter random (norm gains too), so a swapped or misplaced block would show.
void randomize(GPT& model) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (Parameter* p : model.parameters()) {
    std::vector<float> v(static_cast<size_t>(p->numel()));
    for (float& x : v) x = d(rng);
    p->set_values(v);
  }
}

TEST(HfInterchange, ExportThenImportGivesBackEveryWeightBitForBit) {
  const GPTConfig gpt2{
      .vocab = 40, .seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4, .ffn = 48};
  for (const GPTConfig& cfg : {gpt2, llama_config()}) {
    GPT model(cfg, 1);
    randomize(model);
    for (const DType dtype : {DType::F32, DType::BF16}) {
      const std::string dir = fresh_dir("roundtrip");
      export_hf(model, dir, {.dtype = dtype, .tokenizer = ""});
      const HfModel back = import_hf(dir);
      EXPECT_EQ(back.config.model.parameter_count(), cfg.parameter_count());
      const ParameterList a = model.parameters(), b = back.model->parameters();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i]->name, b[i]->name);
        std::vector<float> want = a[i]->value.to_host();
        if (dtype == DType::BF16)
          for (float& x : want) x = bf16_to_float(bf16_from_float(x));
        EXPECT_EQ(b[i]->value.to_host(), want) << a[i]->name;
      }
    }
  }
}

using test::expect_error;

// A copy of a fixture with its config.json edited.
std::string edited_fixture(const char* arch, const std::function<void(Json&)>& edit) {
  const std::string dir = fresh_dir(std::string("edited_") + arch);
  fs::create_directories(dir);
  fs::copy_file(kData + "/" + arch + "/model.safetensors", dir + "/model.safetensors");
  std::ifstream in(kData + "/" + arch + "/config.json");
  Json j = Json::parse(in);
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump();
  return dir;
}

TEST(HfInterchange, BadDirectoriesAndModelsAreRefusedByName) {
  expect_error([] { import_hf("/nonexistent/hf"); }, "config.json: cannot open");
  expect_error(
      [] { import_hf(edited_fixture("llama", [](Json& j) { j["model_type"] = "bert"; })); },
      "model_type \"bert\" is not gpt2 or llama");
  expect_error(
      [] { import_hf(edited_fixture("llama", [](Json& j) { j["num_hidden_layers"] = 2; })); },
      "no tensor 'model.layers.1.input_layernorm.weight'");
  expect_error(
      [] { import_hf(edited_fixture("llama", [](Json& j) { j["intermediate_size"] = 20; })); },
      "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [16,16], the config needs [20,16]");
  expect_error(
      [] { import_hf(edited_fixture("llama", [](Json& j) { j["rms_norm_eps"] = 1e-6; })); },
      "'rms_norm_eps' is 1e-06: fp8lm's norms use 1e-5");
  expect_error(
      [] { import_hf(edited_fixture("gpt2", [](Json& j) { j["activation_function"] = "gelu"; })); },
      "'activation_function' is \"gelu\"");
  expect_error([] { import_hf(edited_fixture("gpt2", [](Json& j) { j.erase("n_embd"); })); },
               "config.json has no 'n_embd'");
  {
    const std::string dir = edited_fixture("gpt2", [](Json&) {});
    fs::remove(dir + "/model.safetensors");
    expect_error([&] { import_hf(dir); }, "no model.safetensors");
  }

  GPTConfig mixed = llama_config();
  mixed.bias = true;  // Llama's blocks with biases: neither architecture
  GPT model(mixed, 1);
  expect_error([&] { export_hf(model, fresh_dir("mixed"), {}); }, "match neither GPT2LMHeadModel");
  GPT llama(llama_config(), 1);
  const std::string taken = fresh_dir("taken");
  fs::create_directories(taken);
  std::ofstream(taken + "/keep.txt") << "a user's file";
  expect_error([&] { export_hf(llama, taken, {}); }, "not an empty directory; not overwriting");
  EXPECT_TRUE(fs::exists(taken + "/keep.txt"));
}

}  // namespace
}  // namespace fp8lm
