#pragma once
// What text a model reads, so that no command feeds it data it would misread: the stride
// demo's ids, bytes, or one tokenizer's ids.
#include <map>
#include <string>

#include "fp8lm/train_config.h"

namespace fp8lm::cli {

enum class ModelInput { StrideIds, Bytes, Tokens };

// From a model file's config and metadata: a model of a token dataset, or one imported from
// Hugging Face (which comes without its data), reads token ids.
ModelInput model_input(const TrainConfig& c, const std::map<std::string, std::string>& metadata);

// The tokenizer a model of token ids reads through: its dataset's, else a tokenizer.json
// beside the model file (fp8lm import puts Hugging Face's there); empty when it has none.
std::string model_tokenizer_file(const TrainConfig& c,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::string& model_path);

// Error unless `data` (a text file or token dataset, as --data names it) is text the model
// reads as it was trained to: bytes for a byte model, the same tokenizer's ids for a model of
// token ids. `model` names the model in the message ("--init runs/x").
void check_model_reads(const TrainConfig& c, const std::map<std::string, std::string>& metadata,
                       const std::string& model_path, const std::string& data,
                       const std::string& model);

}  // namespace fp8lm::cli
