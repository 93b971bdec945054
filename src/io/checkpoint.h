#pragma once
// Checkpoints (DESIGN.md §5): the model file (weights with PyTorch's names and [out, in] layout,
// every GEMM's FP8 state, config, precision, recipe and step in the header's metadata) and a
// training-state file beside it (AdamW moments, FP32 masters of FP8 weights, losses, data
// position). Model files alone serve generate, eval and inspect.
#include <memory>
#include <string>

#include "io/safetensors.h"
#include "train/trainer.h"

namespace fp8lm {

// Serialization of the configuration that built a model and trained it.
std::string train_config_to_json(const TrainConfig& c);
TrainConfig train_config_from_json(const std::string& json, const std::string& origin);

// The model file's tensors and metadata for this trainer's model.
Safetensors model_checkpoint(Trainer& trainer);
// Writes model.safetensors and train_state.safetensors into dir (atomically, each file).
void save_checkpoint(Trainer& trainer, const std::string& dir);
// Rebuilds a trainer from a checkpoint directory written by save_checkpoint: the same weights,
// optimizer, FP8 state, data position and step, so training continues bit for bit.
std::unique_ptr<Trainer> load_checkpoint(const std::string& dir);

// A model file for inference: the model, its config and the file's metadata.
struct LoadedModel {
  TrainConfig config;
  std::unique_ptr<GPT> model;
  Safetensors file;
};
// Validates names, shapes and dtypes against the config in the metadata.
LoadedModel load_model(const std::string& path);

// Applies a model file's tensors (weights and FP8 state) to a model built from its config.
void apply_model_tensors(const Safetensors& file, GPT& model);

}  // namespace fp8lm
