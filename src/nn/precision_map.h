#pragma once
// Per-GEMM precision (issue 14, TE's CustomRecipe): a map that keeps chosen GEMMs in BF16
// inside an FP8 autocast. The map is comma-separated glob patterns (fnmatch, `*` spanning dots)
// over GEMM names as checkpoints name them (layers.0.qkv, layers.3.fc2, ...), and the shortcut
// `first-last-layers`: every GEMM of the first and last transformer layers, as Megatron's
// --first-last-layers-bf16 keeps them. `lm_head` names the tied output head, which already runs
// in BF16 under every recipe.
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace fp8lm {

// Every GEMM's name in a model of n_layers, in model order (GPT::linears()).
std::vector<std::string> gemm_names(int64_t n_layers);

// The GEMMs the map keeps in BF16, in model order. Throws Error naming a pattern that matches
// no GEMM (a typo would otherwise train everything in FP8 silently).
std::vector<std::string> precision_map_gemms(int64_t n_layers, const std::string& map);

// Marks them (Linear::keep_in_bf16) and returns their names.
std::vector<std::string> apply_precision_map(GPT& model, const std::string& map);

}  // namespace fp8lm
