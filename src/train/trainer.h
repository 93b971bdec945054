#pragma once
// The training loop: data, model, FP8 autocast or a BF16/FP32 fallback, AdamW with clipping and
// a warmup+cosine schedule; at the end greedy generation (stride task) or validation loss (text).
#include <chrono>
#include <functional>
#include <string>

#include "fp8lm/train_config.h"

#include "core/precision.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "fp8lm/error.h"
#include "kernels/device.h"
#include "nn/gpt.h"
#include "train/data.h"
#include "train/evaluation.h"
#include "train/fp8_fallback.h"
#include "train/step_reads.h"

namespace fp8lm {

// The last steps whose mean loss is a run's final train loss (summary.json's final_loss, and
// the train loss `fp8lm compare` reads back from metrics.jsonl).
inline constexpr int kFinalLossSteps = 50;

using ProgressFn = std::function<void(const StepStats&)>;

// Where a run stands beyond its weights, optimizer and FP8 state: what a checkpoint keeps so
// that a resumed run continues bit for bit.
struct TrainProgress {
  int64_t step = 0;
  double seconds = 0;
  std::vector<float> losses;
  std::string data_state;  // the data stream's position (its RNG state), as text
  int64_t skipped_steps = 0, consecutive_skips = 0;
  std::string skip_reason;  // what the first step of the current run of skips found
  std::vector<Fp8Fallback> fp8_fallbacks;
  std::vector<int64_t> saturated_steps;  // per GEMM: steps in a row its slots saturated
};

class AdamW;
class GradientBuckets;
class OptimizerSharding;

// What train_step (read_steps) throws when max_skipped_steps steps in a row were skipped: an
// Error naming the step and what went non-finite, carrying the figures of the steps read and
// not yet returned, the stopping one last, for whoever records steps.
class SkipLimitReached : public Error {
 public:
  SkipLimitReached(const std::string& message, std::vector<StepStats> read)
      : Error(message), steps(std::move(read)) {}
  std::vector<StepStats> steps;
};

// One training run, a step at a time, so that a caller can checkpoint, log and stop between
// steps. Everything that decides the next step (weights, optimizer, FP8 state, data position,
// step count, losses) is reachable for checkpoints and restorable.
class Trainer {
 public:
  // ranks: the processes the run spans (world(): all that mpirun launched, or this one).
  explicit Trainer(const TrainConfig& cfg, Communicator& ranks = world());
  ~Trainer();

  // One step; a step whose loss or gradient norm is not finite is skipped (weights, moments
  // and FP8 state as they were) and counted. Throws SkipLimitReached at the limit. It reads
  // every step launched before it too, and returns its own figures.
  StepStats train_step();
  // The same in two halves, so that steps can follow one another without the host waiting for
  // the device (issue 34). launch_step() queues a step and returns at once where its backend
  // decides it (decided_on_backend: the skip, the clipping and AdamW's step count on the
  // device); read_steps() reads every launched step's figures in one wait, in step order, and
  // makes the host's decisions (the skip's record, the BF16 fallback) then. Elsewhere a step
  // is read as it ends. At most kMaxUnreadSteps wait to be read (more are read on launch).
  // Whatever looks at the run's state (checkpoints, validation, the summary) reads first.
  void launch_step();
  std::vector<StepStats> read_steps();
  static constexpr size_t kMaxUnreadSteps = 32;
  bool decided_on_backend() const;
  // Steps launched and not yet read, and whether reading a step makes the host wait for the
  // device: not on the CPU, whose "device" is the host (the run loop reads every step there),
  // nor where steps are read as they end.
  size_t unread_steps() const { return launched_.size(); }
  bool reading_waits() const { return decided_on_backend() && !model_->backend().host_memory(); }
  // Whether the launched steps are due to be read, at most `between` steps at a time: always
  // where reading does not wait, and at the end.
  bool read_due(size_t between) const {
    return !reading_waits() || unread_steps() >= between || done();
  }
  bool done() const { return step_ >= cfg_.steps; }
  // The summary of the run so far, with why it did not end well (result.failure: it ended on
  // skipped steps, or its weights are not finite) ...
  TrainResult end_training();
  // ... then its evaluation added (unless cfg.evaluate is false). finish() is both.
  void evaluate(TrainResult& result);
  TrainResult finish();

  const TrainConfig& config() const { return cfg_; }
  // false: the unfused twins, CPU kernels only (an Error on a GPU).
  void set_fusion(bool on);
  // false: no CUDA graphs; each op of a step is launched as the host reaches it
  // (--no-cuda-graphs). Steps decided on a GPU's backend are otherwise captured and launched
  // as one graph each, after the first kStepsBeforeGraphs. The same bits either way.
  void set_cuda_graphs(bool on) { graphs_ = on; }
  static constexpr int64_t kStepsBeforeGraphs = 2;
  const PrecisionChoice& precision() const { return precision_; }
  // The recipe's line (recipe_description), native where the backend multiplies the block
  // codes itself.
  std::string recipe_line() const;
  // Moves training to a device: the model (weights, FP8 state) and the optimizer's moments are
  // copied onto its backend. Called by the constructor with cfg.device, and again to resume a
  // run on another device.
  void use_device(const DeviceSpec& requested);
  const DeviceChoice& device() const { return device_; }
  // The model and optimizer, on the device's backend.
  GPT& model() { return *model_; }
  AdamW& optimizer() { return *opt_; }
  std::unique_ptr<GPT> release_model() { return std::move(model_); }
  int64_t steps_done() const { return step_; }
  double seconds() const { return seconds_; }
  const std::vector<float>& losses() const { return losses_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  const std::vector<Fp8Fallback>& fp8_fallbacks() const { return fallback_.fallbacks; }
  // Block-scaled recipes: whether the next steps' casts record what they did
  // (Linear::block_stats); the run loop turns it on for the steps it snapshots.
  void collect_block_stats(bool on);
  // The GEMMs the precision map keeps in BF16 (TrainConfig::precision_map).
  const std::vector<std::string>& kept_in_bf16() const { return kept_in_bf16_; }
  TrainProgress progress() const;
  void restore_progress(TrainProgress progress);
  // Mean loss on held-out batches (the stride task's own held-out stream, or the text's
  // validation split). FP8 scaling state is left exactly as it was, so evaluating does not
  // change the training run.
  double validation_loss(int64_t batches = 2);
  // After weights change outside an optimizer step (a restore): re-quantize FP8 weights.
  void refresh_fp8_weights();
  // The data-parallel ranks this run spans (dist::world(): one without mpirun). Each takes its
  // share of every global batch; gradients, the loss and the FP8 amaxes are reduced across
  // them, so every rank holds the same model after every step.
  Communicator& ranks() const { return comm_; }
  // The collectives the gradients travel by: "mpi ..." or, on GPUs, "nccl ... on cuda:N".
  std::string collectives() const;
  // Whether any rank asks (a stop request seen by one rank stops all, at the same step).
  bool any_rank(bool asks) const;
  // ZeRO-1: every rank calls these around a checkpoint. Rank 0 then holds the whole optimizer
  // state (the checkpoint's format does not depend on the world) until the release.
  void gather_optimizer_state();
  void release_gathered_optimizer_state();

 private:
  TrainConfig cfg_;
  Communicator& comm_;
  PrecisionChoice precision_;
  std::unique_ptr<StrideTask> stride_;
  std::unique_ptr<TextSource> text_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<AdamW> opt_;
  StepReads step_reads_;  // the steps' one wait for the device (issue 34)
  // A step's batch, learning rate and start, drawn before it runs.
  struct StepInput {
    int64_t step = 0;  // its number, from 1
    std::vector<Batch> micro;
    std::vector<int64_t> first_row;  // of each micro-batch in the step's rows
    float lr = 0;
    std::chrono::steady_clock::time_point start;
  };
  StepInput next_step_input();
  // Forward and backward of every micro-batch: the row losses into step_reads_' newest step
  // (deferred) or each micro-batch's mean loss into micro_losses.
  void run_micro_batches(const StepInput& in, bool deferred, std::vector<float>& micro_losses);
  // A whole step, decided by the host after reading its loss and norm (several ranks, ZeRO-1,
  // --no-fusion, --fp8-weights).
  StepStats host_decided_step();
  // A step decided on the backend, kept in launched_ until settle() reads it.
  struct LaunchedStep {
    StepInput in;
    bool rolled_back_on_backend = true;  // a skip's FP8 state (ScalingStore::roll_back_if)
  };
  void launch_decided_step();
  void settle();
  std::vector<LaunchedStep> launched_;
  std::vector<StepStats> finished_;  // read, not yet returned by read_steps
  // The host's part of a skipped step: the fallback's search, the FP8 state rolled back to
  // what was remembered, the reason and the count.
  void count_skipped(const StepInput& in, float loss, std::vector<Fp8Fallback>& fell);
  // A read step's figures (its loss recorded, its time added); then kept for read_steps, and
  // SkipLimitReached at the limit.
  StepStats step_stats(const StepInput& in, float loss, float norm, bool skip,
                       std::vector<Fp8Fallback> fell, double took,
                       const Communicator::Traffic& traffic);
  void finish_step(StepStats stats);
  // After step_reads_.read(): kept step `step`'s mean loss of each micro-batch, and the step's
  // mean loss (this rank's share of it): each micro-batch's mean weighted by its share of the
  // step's rows.
  std::vector<float> read_micro_losses(size_t step, const StepInput& in) const;
  double weighted_loss(const StepInput& in, const std::vector<float>& micro_losses) const;
  DeviceChoice device_;
  void move_to(Backend& backend);
  int64_t step_ = 0;
  double seconds_ = 0;
  std::vector<float> losses_;
  int64_t skipped_steps_ = 0, consecutive_skips_ = 0;
  std::string skip_reason_;
  // The automatic BF16 fallback (TrainConfig::fp8_fallback).
  Fp8FallbackState fallback_;
  bool graphs_ = true;
  bool block_stats_ = false;  // casts record statistics, which the host reads in the step
  std::vector<std::string> kept_in_bf16_;  // GEMMs the precision map keeps in BF16
  // This rank's rows of each micro-batch of a step's global batch (the batch itself in one
  // process without accumulation).
  std::vector<Batch> micro_batches(Batch step) const;
  // Gradients summed over the ranks in buckets started during the last micro-batch's
  // backward (several ranks without ZeRO-1; made for the model's parameters when first used).
  std::unique_ptr<GradientBuckets> buckets_;
  GradientBuckets& gradient_buckets();
  // GPU ranks: NCCL between their GPUs (a build with NCCL; without it, through host memory).
  std::unique_ptr<DeviceCollectives> device_comm_;
  int device_comm_gpu_ = -1;
  Communicator::Traffic traffic() const;
  // ZeRO-1 (--zero 1 on several ranks; null otherwise).
  std::unique_ptr<OptimizerSharding> zero_;
  bool zero_sharded() const { return zero_ != nullptr; }
  // fp8: the weights of FP8 Linears (--fp8-weights, a GEMM not fallen back to BF16) as their
  // codes and scales, cast by the rank that updated them, which alone keeps their FP32 masters
  // from then on (TE's FP8 all-gather); else every weight in FP32, masters whole on every rank
  // again.
  void all_gather_weights(bool fp8);
  std::vector<Parameter*> regathered_masters_;  // on rank 0 for a checkpoint, until released
  AmaxReducer amax_reducer();
};

// The precision of GEMMs that do not run in FP8 under a run's precision.
Precision gemm_precision_for(Precision p);

// The precision scopes a trained model's forward runs in (FP8 autocast and GEMM precision).
struct InferenceScope {
  InferenceScope(Precision p, const Fp8Recipe& recipe);
  GemmPrecision gemm;
  Autocast autocast;
};

// A trained model for generation and held-out loss on a device (a copy of it on the device's
// backend when that is not the model's own), under the precision's scopes.
class InferenceModel {
 public:
  // On a GPU, a copy of the model on its backend.
  InferenceModel(GPT& model, const TrainConfig& cfg, const DeviceSpec& device);
  std::vector<int32_t> generate(const int32_t* prompts, int64_t B, int64_t P, int64_t n_new) {
    return model_.generate(prompts, B, P, n_new);
  }
  std::vector<std::vector<int32_t>> generate_sequences(const int32_t* prompts, int64_t B, int64_t P,
                                                       int64_t n_new, const GenerateOptions& o) {
    return model_.generate_sequences(prompts, B, P, n_new, o);
  }
  GPT& model() { return model_; }
  const DeviceChoice& device() const { return device_; }
  const PrecisionChoice& precision() const { return precision_; }

 private:
  DeviceChoice device_;
  PrecisionChoice precision_;
  std::unique_ptr<GPT> copy_;  // the model on the device's backend, when that is not its own
  GPT& model_;
  // Last, so it closes (updating the FP8 scales of the model it ran) before copy_ goes.
  InferenceScope scope_;
};

// Trains to the end; the model is returned through *model_out when given.
TrainResult train(const TrainConfig& cfg, const ProgressFn& progress = {},
                  std::unique_ptr<GPT>* model_out = nullptr);

}  // namespace fp8lm
