// fp8lm export, import and logits: models in and out of the Hugging Face ecosystem, and the
// raw logits that let anyone hold fp8lm's forward against another framework's.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/parse.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/hf_interchange.h"
#include "io/new_dir.h"
#include "train/token_shards.h"

namespace fp8lm::cli {
namespace {

namespace fs = std::filesystem;

struct ExportFlags {
  std::string format = "hf", source, out, dtype = "fp32", tokenizer;
  std::string positional_out;  // the old spelling `export SRC DIR`
  bool fp8_codes = false;
};

void run_export(ExportFlags f) {
  if (!f.positional_out.empty()) {
    if (!f.out.empty()) throw Error("export: give the directory once, as --out DIR");
    fmt::print(stderr, "note: `export SRC DIR` is an old spelling; write export SRC --out DIR\n");
    f.out = f.positional_out;
  }
  if (f.out.empty()) throw Error("export: --out DIR names the directory to write");
  if (f.format != "hf") throw Error(fmt::format("--format '{}': the format is hf", f.format));
  HfExportOptions o;
  if (f.dtype == "bf16") {
    o.dtype = DType::BF16;
  } else if (f.dtype != "fp32") {
    throw Error(fmt::format("--dtype '{}' is not fp32 or bf16", f.dtype));
  }
  LoadedModel m = load_model(model_file_path(f.source));
  if (f.fp8_codes) {
    if (m.config.precision != Precision::Fp8)
      throw Error("--fp8-codes: the model did not train in FP8 (--precision fp8)");
    o.fp8_codes = &m.config.recipe;
    o.source = &m.file;
  }
  o.tokenizer = f.tokenizer;
  if (!m.config.data.empty() && is_token_dataset(m.config.data)) {
    const ShardManifest data = read_manifest(m.config.data);
    if (o.tokenizer.empty()) o.tokenizer = (fs::path(m.config.data) / data.tokenizer).string();
    o.end_of_text = data.eot;  // what the model learnt to end its documents with
  }
  export_hf(*m.model, f.out, o);
  fmt::print("wrote {} ({}, {} weights{}{}) to {}\n",
             hf_class_name(hf_architecture(m.config.model)), f.dtype,
             m.config.precision == Precision::Fp8 ? "FP8 model's dequantized" : "its",
             f.fp8_codes ? ", their FP8 codes in fp8_weights.safetensors" : "",
             o.tokenizer.empty() ? "" : ", tokenizer.json", f.out);
}

struct ImportFlags {
  std::string source, out;
};

void run_import(const ImportFlags& f) {
  HfModel m = import_hf(f.source);
  make_new_or_empty_dir(f.out, "--out " + f.out);
  CheckpointInfo info;
  info.config = m.config;
  info.precision = "fp32";
  SafetensorsWriter file = model_file(*m.model, info);
  file.metadata()["source"] = "huggingface";  // a model of token ids, trained elsewhere
  file.write(f.out + "/model.safetensors");
  const bool tokenizer = fs::is_regular_file(f.source + "/tokenizer.json");
  if (tokenizer) fs::copy_file(f.source + "/tokenizer.json", f.out + "/tokenizer.json");
  fmt::print("imported {} ({} parameters) into {}/model.safetensors{}\n",
             hf_class_name(hf_architecture(m.config.model)), m.config.model.parameter_count(),
             f.out, tokenizer ? " with its tokenizer.json (generate and eval read it)" : "");
}

struct LogitsFlags {
  std::string checkpoint, tokens;
};

// JSON [[V floats] per position] of one sequence: the forward in FP32 GEMMs.
void run_logits(const LogitsFlags& f) {
  LoadedModel m = load_model(model_file_path(f.checkpoint));
  const std::vector<int32_t> ids = parse_token_ids(f.tokens, m.config.model.vocab, "--tokens");
  const auto T = static_cast<int64_t>(ids.size());
  if (T == 0 || T > m.config.model.seq_len)
    throw Error(fmt::format("--tokens: 1 to {} ids", m.config.model.seq_len));
  m.model->forward(ids.data(), nullptr, 1, T);
  const int64_t V = m.config.model.vocab;
  std::vector<float> logits(static_cast<size_t>(T * V));
  m.model->backend().download(logits.data(), m.model->logits(), logits.size() * sizeof(float));
  std::string out = "[";
  for (int64_t t = 0; t < T; ++t) {
    out += t ? ",\n[" : "[";
    for (int64_t v = 0; v < V; ++v) out += fmt::format("{}{:.9g}", v ? "," : "", logits[t * V + v]);
    out += "]";
  }
  fmt::print("{}]\n", out);
}

}  // namespace

void add_hf_commands(CLI::App& app) {
  auto e = std::make_shared<ExportFlags>();
  auto* ex = app.add_subcommand(
      "export", "Write a model as a Hugging Face directory (GPT2LMHeadModel or LlamaForCausalLM)");
  ex->add_option("source", e->source, "a model file or a run directory")
      ->type_name("MODEL")
      ->required();
  ex->add_option("--out", e->out, "the directory to write (new, or empty)")->type_name("DIR");
  ex->add_option("dir", e->positional_out)->group("");  // the old spelling
  ex->add_option("--format", e->format, "the format: Hugging Face transformers' directory")
      ->type_name("{hf}");
  ex->add_option("--dtype", e->dtype, "the weights' dtype")->type_name("{fp32,bf16}");
  ex->add_flag("--fp8-codes", e->fp8_codes,
               "also fp8_weights.safetensors: each GEMM weight's FP8 codes and scale_inv "
               "(per-tensor recipes)");
  ex->add_option("--tokenizer", e->tokenizer,
                 "tokenizer.json to include (default: the model's token dataset's)")
      ->type_name("TOKENIZER");
  on_call(ex, e, run_export);

  auto i = std::make_shared<ImportFlags>();
  auto* im = app.add_subcommand(
      "import", "Read a Hugging Face GPT-2 or Llama directory into an fp8lm model file");
  im->add_option("source", i->source, "the Hugging Face model directory")
      ->type_name("DIR")
      ->required();
  im->add_option("--out", i->out, "the directory to write model.safetensors into (new, or empty)")
      ->type_name("DIR")
      ->required();
  on_call(im, i, run_import);

  auto l = std::make_shared<LogitsFlags>();
  auto* lo = app.add_subcommand("logits", "Print a sequence's logits as JSON (FP32 forward)");
  lo->add_option("--checkpoint", l->checkpoint, "a model file or a run directory")
      ->type_name("MODEL")
      ->required();
  lo->add_option("--tokens", l->tokens, "token ids (\"3 10 17\")")->required();
  on_call(lo, l, run_logits);
}

}  // namespace fp8lm::cli
