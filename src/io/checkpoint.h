#pragma once
// Checkpoints (docs/reference/checkpoint-names.md): the model file (io/checkpoint.cpp: weights
// with PyTorch's names and [out, in] layout, every GEMM's FP8 state, config, precision, recipe
// and step in the header's metadata) and a training-state file beside it (io/train_state.cpp:
// AdamW moments, FP32 masters of FP8 weights, losses, data position). Model files alone serve
// generate, eval and inspect.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace fp8lm {

// Serialization of the configuration that built a model and trained it.
std::string train_config_to_json(const TrainConfig& c);
TrainConfig train_config_from_json(const std::string& json, const std::string& origin);

// What a model file's metadata says beyond its tensors.
struct CheckpointInfo {
  TrainConfig config;
  std::string precision;   // the resolved precision's label, e.g. "fp8 (emulated)"
  bool fp8_state = false;  // the GEMMs ran in FP8: every GEMM's scaling state is saved
  int64_t step = 0;
  int64_t skipped_steps = 0;  // non-finite steps skipped so far (in the metadata when > 0)
  std::vector<Fp8Fallback> fp8_fallbacks;  // GEMMs that fell back to BF16 (when any)
  // Data-parallel ranks that trained it (in the metadata when > 1): its FP8 amaxes were
  // max-reduced across them before every update, and every rank held this state.
  int world_size = 1;
  // The run that wrote it and the fingerprint of its data, JSON (io/run_identity.h; in the
  // metadata when set).
  std::string run_id;
  std::string data;
};

// The automatic fallback's record as JSON ([{gemm, slot, reason, step}]), and back (Error
// naming `origin` when it is not such a list).
nlohmann::json fp8_fallbacks_json(const std::vector<Fp8Fallback>& fallbacks);
// Block-scaled recipes: each GEMM's last recorded casts (Linear::block_stats), as
// {gemm: {role: {blocks, zero, saturated, flushed, exponents: {"e": n}, tensor_scale}}};
// null when no GEMM recorded any.
nlohmann::json block_scales_json(GPT& model);
std::vector<Fp8Fallback> fp8_fallbacks_from_json(const std::string& text,
                                                 const std::string& origin);

// The model file's tensors and metadata, fetched as the write reaches them. Its write is an
// Error if a weight is not finite: such a model is never written.
SafetensorsWriter model_file(GPT& model, const CheckpointInfo& info);
// Writes train_state.safetensors (optimizer, FP32 masters of FP8 weights, progress), then
// model.safetensors into dir (atomically, each file).
void save_checkpoint(const std::string& dir, GPT& model, const AdamW& optimizer,
                     const CheckpointInfo& info, const TrainProgress& progress);
// The config a checkpoint directory was written with: what to build the model and optimizer
// from before load_checkpoint restores them.
TrainConfig checkpoint_config(const std::string& dir);
// Restores weights, FP8 state and optimizer from a checkpoint directory written by
// save_checkpoint, so training continues bit for bit; returns the run's progress. On Error
// (a damaged tensor found part-way) the model and optimizer are half loaded: drop them.
TrainProgress load_checkpoint(const std::string& dir, GPT& model, AdamW& optimizer);

// A model file for inference: the model, its config and the file's metadata.
struct LoadedModel {
  TrainConfig config;
  std::unique_ptr<GPT> model;
  Safetensors file;
};
// Validates names, shapes and dtypes against the config in the metadata.
LoadedModel load_model(const std::string& path);

// A number in a file's metadata (int64_t or double, the whole text); Error naming the file and
// the key when it is missing or not a number.
template <class T>
T metadata_number(const Safetensors& file, const std::string& key);

// Error naming origin unless step is from 0 to the run's steps.
void check_step_in_run(const std::string& origin, int64_t step, int64_t steps);

// A warning (io/warning.h) when the file's checksums do not cover all of it (an older fp8lm's,
// or another tool's file): what could not be verified.
void warn_unverified(const std::string& path, const std::map<std::string, std::string>& meta);

// Applies a model file's tensors (weights and FP8 state) to a model built from its config;
// Error naming a tensor that holds a non-finite value.
void apply_model_tensors(const Safetensors& file, GPT& model);

}  // namespace fp8lm
