#pragma once
// Hugging Face interchange (issue 15): an fp8lm model as a directory that transformers loads as
// GPT2LMHeadModel or LlamaForCausalLM (config.json, model.safetensors with their tensor names
// and layouts), and such a directory read back into an fp8lm model. One table maps each of our
// parameters' rows onto the Hugging Face tensors both ways, so that export then import gives
// back the same FP32 weights bit for bit.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "fp8lm/recipe.h"
#include "io/hf_config.h"
#include "nn/gpt.h"
#include "train/trainer.h"

namespace fp8lm {

// GPT-2's blocks (LayerNorm, GELU or ReLU, learned positions, biases, a tied head, as many
// key/value heads as query heads) or Llama's (RMSNorm, SwiGLU, rotary embeddings, no biases);
// Error naming what matches neither.
HfArchitecture hf_architecture(const GPTConfig& m);
std::string_view hf_class_name(HfArchitecture a);  // "GPT2LMHeadModel", "LlamaForCausalLM"

class Safetensors;

struct HfExportOptions {
  DType dtype = DType::F32;  // F32, or BF16 (each weight rounded to nearest even)
  std::string tokenizer;     // a tokenizer.json to copy beside the weights; empty: none
  // The id the model's documents end with (its token dataset's end-of-text token): what
  // config.json and generation_config.json name as bos, eos (and pad) so that generate stops
  // there. None: the tokenizer's <|endoftext|>, where it has one (io/hf_special_tokens.h).
  std::optional<int32_t> end_of_text;
  // Also fp8_weights.safetensors: each GEMM weight as FP8 codes in the Hugging Face tensor's
  // name and layout (F8_E4M3) and "<name>.scale_inv" (F32 [1]; value = code * scale_inv), as
  // the model's next FP8 forward casts it under a per-tensor recipe: the codes a model file
  // holds (--fp8-weights) taken as they are, else the master cast through its weight slot.
  const Fp8Recipe* fp8_codes = nullptr;  // the model's recipe; null: no codes
  const Safetensors* source = nullptr;   // the model file, for codes it holds
};

// Writes config.json, generation_config.json, model.safetensors (and with a tokenizer:
// tokenizer.json, tokenizer_config.json, special_tokens_map.json; and fp8_weights.safetensors)
// into dir, which must be new or empty. The weights are the FP32 masters (an FP8 model's
// dequantized).
void export_hf(GPT& model, const std::string& dir, const HfExportOptions& options);

// A Hugging Face directory of one of the two architectures (config.json and model.safetensors,
// or the shards model.safetensors.index.json names; F32, F16 or BF16 weights, widened exactly):
// its config, and a model holding its weights. Error naming a missing shard, a missing,
// mis-shaped or unreadable tensor, or a config field this engine cannot follow.
struct HfModel {
  TrainConfig config;
  std::unique_ptr<GPT> model;
};
HfModel import_hf(const std::string& dir);

}  // namespace fp8lm
