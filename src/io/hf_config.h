#pragma once
// A Hugging Face model directory's config.json read as an fp8lm model (the import's first
// step): apart from the weights so that it is fuzzed on its own (tests/fuzz/fuzz_hf_import.cpp).
#include <string>

#include "fp8lm/model_config.h"

namespace fp8lm {

enum class HfArchitecture { Gpt2, Llama };

// kNormEps as the decimal people write (1e-05), not the float's double (9.99999974e-06).
inline constexpr double kHfNormEps = 1e-5;

struct HfConfig {
  HfArchitecture architecture = HfArchitecture::Gpt2;
  GPTConfig model;
};

// dir/config.json (model_type gpt2 or llama) as a model config that passes GPTConfig::validate;
// Error naming the file and the field that is missing, mistyped or one this engine cannot follow.
HfConfig read_hf_config(const std::string& dir);

}  // namespace fp8lm
