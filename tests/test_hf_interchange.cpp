// Hugging Face interchange: directories written by `export` and checked by transformers
// (tests/data/hf, made by tools/hf_check.py make: a tiny GPT-2 and a tiny Llama with grouped
// queries and an untied head, with transformers' logits) import into models whose logits equal
// those; export then import gives back every weight bit for bit; and what cannot be read or
// written is refused in one line naming the problem.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>

#include "core/bf16.h"
#include "core/fp16.h"
#include "fp8lm/error.h"
#include "io/hf_interchange.h"
#include "io/safetensors.h"
#include "kernels/types.h"
#include "nn/autocast.h"
#include "safetensors_edit.h"
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

const GPTConfig kGpt2{
    .vocab = 40, .seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4, .ffn = 48};

// GPT-2's blocks with every ungated activation, Llama's with every gated one (GeGLU as Llama's
// MLP with hidden_act gelu_pytorch_tanh).
std::vector<GPTConfig> every_activation() {
  std::vector<GPTConfig> configs;
  for (std::string_view name : activation_names()) {
    const Activation a = parse_activation(name);
    configs.push_back(activation_gated(a) ? llama_config() : kGpt2);
    configs.back().activation = a;
  }
  return configs;
}

TEST(HfInterchange, ExportThenImportGivesBackEveryWeightBitForBit) {
  for (const GPTConfig& cfg : every_activation()) {
    SCOPED_TRACE(activation_name(cfg.activation));
    GPT model(cfg, 1);
    randomize(model);
    for (const DType dtype : {DType::F32, DType::BF16}) {
      const std::string dir = fresh_dir("roundtrip");
      HfExportOptions o;
      o.dtype = dtype;
      export_hf(model, dir, o);
      const HfModel back = import_hf(dir);
      EXPECT_EQ(back.config.model.activation, cfg.activation);
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
  expect_error([] { import_hf("/nonexistent/hf"); },
               "config.json: cannot be read: No such file or directory");
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

// ---- The files that let transformers' tokenizer and generate find the end of a text.

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) ADD_FAILURE() << "no " << path;
  return Json::parse(in);
}

// A tokenizer.json as far as export reads it: a vocabulary of `words` (ids 0..) and added
// tokens.
std::string write_tokenizer(const std::string& name, int words, const std::vector<Json>& added) {
  Json vocab = Json::object();
  for (int i = 0; i < words; ++i) vocab[fmt::format("w{}", i)] = i;
  const std::string path = fresh_dir(name) + ".json";
  std::ofstream(path) << Json{{"version", "1.0"},
                              {"added_tokens", Json(added)},
                              {"model",
                               {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}}}
                             .dump();
  return path;
}

Json added_token(int id, const char* content) {
  return {{"id", id}, {"content", content}, {"special", true}};
}

std::string exported(const GPTConfig& cfg, const std::string& name, HfExportOptions o) {
  GPT model(cfg, 1);
  const std::string dir = fresh_dir(name);
  export_hf(model, dir, o);
  return dir;
}

TEST(HfInterchange, ExportNamesTheEndOfTextTokenForTokenizerAndGenerate) {
  // GPT-2's <|endoftext|> among added tokens (not at 50256: the class default transformers
  // would otherwise take, past this vocabulary).
  HfExportOptions o;
  o.tokenizer = write_tokenizer("tok_eot", 30, {added_token(30, "<|endoftext|>")});
  const std::string dir = exported(kGpt2, "eot", o);
  const Json config = read_json(dir + "/config.json");
  EXPECT_EQ(config["bos_token_id"], 30);
  EXPECT_EQ(config["eos_token_id"], 30);
  EXPECT_FALSE(config.contains("pad_token_id"));  // the tokenizer has no padding token
  // generate pads with the end of text (quietly: it warns when it has to pick that itself) and
  // stops at the positions' end.
  EXPECT_EQ(read_json(dir + "/generation_config.json"), Json({{"bos_token_id", 30},
                                                              {"eos_token_id", 30},
                                                              {"pad_token_id", 30},
                                                              {"max_length", kGpt2.seq_len}}));
  const Json tc = read_json(dir + "/tokenizer_config.json");
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  EXPECT_EQ(tc["bos_token"], "<|endoftext|>");
  EXPECT_FALSE(tc.contains("pad_token"));
  EXPECT_EQ(tc["model_input_names"], Json({"input_ids", "attention_mask"}));
  EXPECT_EQ(tc["clean_up_tokenization_spaces"], false);
  EXPECT_EQ(tc["model_max_length"], kGpt2.seq_len);
  EXPECT_EQ(read_json(dir + "/special_tokens_map.json"),
            Json({{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}}));
  EXPECT_EQ(test::read_bytes(dir + "/tokenizer.json"), test::read_bytes(o.tokenizer));
}

TEST(HfInterchange, ExportTakesTheDatasetsEndOfTextAndTheTokenizersPadding) {
  // A token dataset prepared with --eot w3, and a tokenizer with a padding token of its own.
  HfExportOptions o;
  o.tokenizer =
      write_tokenizer("tok_pad", 30, {added_token(0, "<|endoftext|>"), added_token(31, "<pad>")});
  o.end_of_text = 3;
  const std::string dir = exported(llama_config(), "dataset_eot", o);
  const Json config = read_json(dir + "/config.json");
  EXPECT_EQ(config["eos_token_id"], 3);
  EXPECT_EQ(config["pad_token_id"], 31);
  const Json gen = read_json(dir + "/generation_config.json");
  EXPECT_EQ(gen["eos_token_id"], 3);
  EXPECT_EQ(gen["pad_token_id"], 31);
  EXPECT_EQ(read_json(dir + "/special_tokens_map.json"),
            Json({{"bos_token", "w3"}, {"eos_token", "w3"}, {"pad_token", "<pad>"}}));
  EXPECT_EQ(read_json(dir + "/tokenizer_config.json")["pad_token"], "<pad>");
}

TEST(HfInterchange, ExportWithoutAnEndOfTextTokenNamesNone) {
  // Byte-level and stride models have no tokenizer: null ids, so that neither GPT2Config's
  // 50256 nor LlamaConfig's 1 and 2 (ordinary tokens here) end a generation.
  for (const GPTConfig& cfg : {kGpt2, llama_config()}) {
    const std::string dir = exported(cfg, "no_tokenizer", {});
    const Json config = read_json(dir + "/config.json");
    EXPECT_TRUE(config.at("bos_token_id").is_null());
    EXPECT_TRUE(config.at("eos_token_id").is_null());
    EXPECT_EQ(read_json(dir + "/generation_config.json"), Json({{"max_length", cfg.seq_len}}));
    EXPECT_FALSE(fs::exists(dir + "/tokenizer_config.json"));
    EXPECT_FALSE(fs::exists(dir + "/special_tokens_map.json"));
  }
  HfExportOptions o;  // a tokenizer without <|endoftext|>
  o.tokenizer = write_tokenizer("tok_plain", 30, {});
  const std::string dir = exported(kGpt2, "plain_tokenizer", o);
  EXPECT_TRUE(read_json(dir + "/config.json").at("eos_token_id").is_null());
  EXPECT_EQ(read_json(dir + "/special_tokens_map.json"), Json::object());
}

TEST(HfInterchange, ExportRefusesEndOfTextTokensItCannotName) {
  HfExportOptions o;
  o.tokenizer = write_tokenizer("tok_small", 30, {});
  o.end_of_text = 35;
  expect_error([&] { exported(kGpt2, "bad_eot", o); },
               "no token has id 35, the end-of-text token of the model's data");
  o.tokenizer = write_tokenizer("tok_large", 30, {added_token(50256, "<|endoftext|>")});
  o.end_of_text.reset();
  expect_error([&] { exported(kGpt2, "large_tokenizer", o); },
               "50257 tokens, more than the model's vocabulary of 40");
  // Refused before anything is written.
  EXPECT_FALSE(fs::exists(testing::TempDir() + "fp8lm_hf_large_tokenizer"));
}

// ---- Checkpoints as transformers saves them: sharded, in F16 or BF16.

// An F32 export's tensors rewritten as another tool writes them: `shards` files and their
// index (or one model.safetensors), no checksums, each tensor labelled `dtype`: "F32" (or
// "I32": the same bytes under a dtype that is no float) as they are, "F16" and "BF16" as their
// 16-bit codes.
void rewrite(const std::string& from, const std::string& to, int shards, const std::string& dtype) {
  const Safetensors src = Safetensors::read(from + "/model.safetensors");
  const std::vector<std::string> names = src.names();
  fs::create_directories(to);
  fs::copy_file(from + "/config.json", to + "/config.json");
  Json weight_map = Json::object();
  for (int s = 0; s < shards; ++s) {
    const std::string file = shards == 1
                                 ? "model.safetensors"
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    SafetensorsWriter w;
    for (size_t i = 0; i < names.size(); ++i) {
      if (static_cast<int>(i * static_cast<size_t>(shards) / names.size()) != s) continue;
      const std::vector<float> v = src.at(names[i]).to_f32();
      std::vector<uint16_t> codes(v.size());
      for (size_t k = 0; k < v.size(); ++k)
        codes[k] = dtype == "F16" ? fp16_from_float(v[k]) : bf16_from_float(v[k]);
      if (dtype == "F32" || dtype == "I32") {
        w.add_f32(names[i], src.at(names[i]).shape, v);
      } else {  // written as BF16, the 2-byte dtype the writer has, then relabelled
        w.add(names[i], DType::BF16, src.at(names[i]).shape,
              [codes](const SafetensorsWriter::Sink& sink) {
                sink({reinterpret_cast<const uint8_t*>(codes.data()), codes.size() * 2});
              });
      }
      weight_map[names[i]] = file;
    }
    w.metadata()["format"] = "pt";
    w.write(to + "/" + file);
    std::vector<uint8_t> bytes = test::read_bytes(to + "/" + file);
    test::without_checksums(bytes);
    Json header = Json::parse(test::header_of(bytes));
    for (auto& [name, e] : header.items())
      if (name != "__metadata__") e["dtype"] = dtype;
    test::set_header(bytes, header.dump());
    test::write_bytes(to + "/" + file, bytes);
  }
  if (shards > 1) {
    std::ofstream(to + "/model.safetensors.index.json")
        << Json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2);
  }
}

// Every parameter of b equals a's, each value through `round` (bit for bit).
void expect_weights(GPT& a, GPT& b, float (*round)(float)) {
  const ParameterList pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> want = pa[i]->value.to_host();
    for (float& x : want) x = round(x);
    const std::vector<float> got = pb[i]->value.to_host();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << pa[i]->name;
  }
}

float as_is(float x) {
  return x;
}
float through_f16(float x) {
  return fp16_to_float(fp16_from_float(x));
}
float through_bf16(float x) {
  return bf16_to_float(bf16_from_float(x));
}

TEST(HfInterchange, ShardedCheckpointsImportAsTheSingleFile) {
  for (const GPTConfig& cfg : {kGpt2, llama_config()}) {
    GPT model(cfg, 1);
    randomize(model);
    const std::string single = fresh_dir("single");
    export_hf(model, single, {});
    for (const int shards : {2, 3}) {
      const std::string dir = fresh_dir(fmt::format("sharded{}", shards));
      rewrite(single, dir, shards, "F32");
      ASSERT_FALSE(fs::exists(dir + "/model.safetensors"));
      const HfModel back = import_hf(dir);
      expect_weights(*import_hf(single).model, *back.model, as_is);
      expect_weights(model, *back.model, as_is);
    }
  }
}

// The token embedding holds F16's edge values (the smallest subnormal, the largest subnormal
// and normal, signed zero) and F16 codes spread over the whole range, among random weights.
void salt_with_f16_codes(GPT& model) {
  for (Parameter* p : model.parameters()) {
    if (p->name != "wte") continue;
    std::vector<float> v = p->value.to_host();
    const fp16_t edges[] = {0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x8000, 0x3c00};
    size_t k = 0;
    for (const fp16_t h : edges) v[k++] = fp16_to_float(h);
    for (uint32_t h = 0; k < v.size() / 2; h += 97)
      if ((h & 0x7c00u) != 0x7c00u) v[k++] = fp16_to_float(static_cast<fp16_t>(h & 0xffffu));
    p->set_values(v);
  }
}

TEST(HfInterchange, F16AndBf16WeightsImportAsTheirExactValues) {
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  for (const GPTConfig& cfg : {kGpt2, llama_config()}) {
    GPT model(cfg, 1);
    randomize(model);
    salt_with_f16_codes(model);
    const std::string single = fresh_dir("wide");
    export_hf(model, single, {});
    for (const int shards : {1, 2}) {
      SCOPED_TRACE(shards);
      const std::string f16 = fresh_dir("f16"), bf16 = fresh_dir("bf16");
      rewrite(single, f16, shards, "F16");
      rewrite(single, bf16, shards, "BF16");
      expect_weights(model, *import_hf(f16).model, through_f16);
      expect_weights(model, *import_hf(bf16).model, through_bf16);
    }
  }
}

TEST(HfInterchange, ShardErrorsNameTheShardTensorOrDtype) {
  GPT model(kGpt2, 1);
  const std::string single = fresh_dir("err_single");
  export_hf(model, single, {});
  const std::string shard2 = "model-00002-of-00002.safetensors";
  {
    const std::string dir = fresh_dir("missing_shard");
    rewrite(single, dir, 2, "F32");
    fs::remove(dir + "/" + shard2);
    expect_error([&] { import_hf(dir); },
                 "model.safetensors.index.json: its shard " + shard2 + " is missing");
  }
  {
    // The index maps a tensor to the other shard than the one that holds it.
    const std::string dir = fresh_dir("misplaced");
    rewrite(single, dir, 2, "F32");
    Json index = read_json(dir + "/model.safetensors.index.json");
    std::string moved;
    for (const auto& [name, file] : index["weight_map"].items())
      if (file != shard2 && moved.empty()) moved = name;
    index["weight_map"][moved] = shard2;
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
    expect_error([&] { import_hf(dir); }, shard2 + ": no tensor '" + moved +
                                              "', which model.safetensors.index.json maps there");
  }
  {
    const std::string dir = fresh_dir("outside");
    rewrite(single, dir, 2, "F32");
    Json index = read_json(dir + "/model.safetensors.index.json");
    index["weight_map"]["transformer.wte.weight"] = "../model.safetensors";
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
    expect_error([&] { import_hf(dir); }, "not a file beside it");
    // Found by fuzz_hf_import: a name too long to look up threw filesystem_error. Longer than
    // a file name can be, it is not a file beside the index.
    index["weight_map"]["transformer.wte.weight"] = std::string(5000, 'x');
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
    expect_error([&] { import_hf(dir); }, "not a file beside it");
  }
  {
    // A dtype of the same width as F32 that is no float format fp8lm reads.
    const std::string dir = fresh_dir("int_weights");
    rewrite(single, dir, 1, "I32");
    expect_error([&] { import_hf(dir); },
                 "tensor 'transformer.wte.weight' has dtype I32; fp8lm reads F32, F16 "
                 "and BF16");
  }
  {
    const std::string dir = fresh_dir("no_weights");
    rewrite(single, dir, 2, "F32");
    fs::remove(dir + "/model.safetensors.index.json");
    expect_error([&] { import_hf(dir); }, "no model.safetensors or model.safetensors.index.json");
  }
}

}  // namespace
}  // namespace fp8lm
