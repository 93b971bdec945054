#pragma once
// Training and using a model through the library without its internals: a run a step at a
// time, its checkpoints, every GEMM's FP8 scaling state, and greedy generation.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp8lm/fp8_state.h"
#include "fp8lm/generation.h"
#include "fp8lm/train_config.h"

namespace fp8lm {

class Trainer;
class LoadedModelImpl;

// One training run (TrainConfig: the model, precision, recipe and schedule).
class Training {
 public:
  explicit Training(const TrainConfig& config);  // throws Error naming a bad setting
  // Continues a run from a checkpoint directory (save_checkpoint, or a run directory's
  // checkpoints/step-N): weights, optimizer, FP8 state and data position, so the steps that
  // follow are those of the uninterrupted run, bit for bit.
  static Training resume(const std::string& checkpoint_dir);
  ~Training();
  Training(Training&&) noexcept;
  Training& operator=(Training&&) noexcept;

  // One step, then the held-out loss where `fp8lm train` measures it (StepStats::val_loss), so
  // that a run through the library is the command line's run. Throws Error when
  // max_skipped_steps steps in a row had a non-finite loss or gradients.
  StepStats step();
  bool done() const;
  // Evaluates (stride accuracy, or validation loss and a sample) and summarizes the run.
  TrainResult finish();

  void save_checkpoint(const std::string& dir);
  // The model file `fp8lm generate`, `eval` and `inspect` read (and Model::load).
  void save_model(const std::string& path);

  const TrainConfig& config() const;
  const PrecisionChoice& precision() const;
  // Every GEMM's slots, in model order (empty outside FP8 runs' GEMMs: scales stay 1).
  std::vector<Fp8SlotState> fp8_state();

 private:
  explicit Training(std::unique_ptr<Trainer> trainer);
  std::unique_ptr<Trainer> trainer_;
};

// A model file, for generation and inspection.
class Model {
 public:
  // Throws Error for a file that is not a complete fp8lm model.
  static Model load(const std::string& path, DeviceSpec device = {DeviceSpec::Cpu, 0});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const TrainConfig& config() const;
  // Greedy generation in the precision the model was trained in: prompts [B, P] (row-major,
  // B = prompts.size() / P) -> the n_new tokens after each prompt.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompts, int64_t P, int64_t n_new);
  // The same as `options` says (sampling, stop tokens, streaming): each prompt's new tokens, at
  // most n_new, fewer where it stopped.
  std::vector<std::vector<int32_t>> generate(const std::vector<int32_t>& prompts, int64_t P,
                                             int64_t n_new, const GenerateOptions& options);
  std::vector<Fp8SlotState> fp8_state();

 private:
  explicit Model(std::unique_ptr<LoadedModelImpl> impl);
  std::unique_ptr<LoadedModelImpl> impl_;
};

}  // namespace fp8lm
