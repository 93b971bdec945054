#pragma once
// A training run's settings (every `fp8lm train` flag, the --config JSON keys), a step's
// figures and a finished run's result.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8lm/model_config.h"
#include "fp8lm/precision.h"
#include "fp8lm/recipe.h"

namespace fp8lm {

// Where steps run: `--device auto|cpu|cuda[:N]`.
struct DeviceSpec {
  enum Kind { Auto, Cpu, Cuda } kind = Auto;
  int index = 0;  // cuda:N
  // auto or cuda without an index: under mpirun each rank takes its local rank's GPU.
  bool any_gpu = false;
};

// A GEMM moved from FP8 to BF16 for the rest of a run by the automatic fallback.
struct Fp8Fallback {
  std::string gemm;    // e.g. "layers.0.fc2"
  std::string slot;    // the FP8 slot that showed it: "output", "input", "grad_output", ...
  std::string reason;  // e.g. "non-finite FP8 output"
  int64_t step = 0;    // the step it happened in
};

struct TrainConfig {
  GPTConfig model;
  Precision precision = Precision::Auto;
  Fp8Recipe recipe;
  bool fp8_weights = false;
  bool fusion = true;  // false: the unfused twins (--no-fusion), to measure what fusion is worth
  // Where the steps run. Not part of a checkpoint's config: a run resumes on any device.
  DeviceSpec device{DeviceSpec::Cpu, 0};
  int64_t steps = 120;
  // Sequences in one forward and backward, across all ranks (each takes its share).
  int64_t batch_size = 32;
  // Micro-batches of batch_size sequences whose gradients an optimizer step sums (TE's
  // gradient accumulation): a step trains on batch_size x grad_accum sequences.
  int64_t grad_accum = 1;
  // ZeRO stage (`--zero 1`): 1 shards the AdamW moments across the data-parallel ranks (each
  // updates its share of the parameters, then the weights are all-gathered); 0 keeps them
  // whole on every rank.
  int64_t zero = 0;
  // Data parallel: gradients travel and are summed in BF16 (`--grad-reduce bf16`: half the
  // bytes; each hop rounds) instead of FP32.
  bool bf16_grad_reduce = false;
  // Data parallel: gradients are all-reduced in buckets of about this many MiB, each started
  // as soon as backward has finished it (`--grad-bucket-mb`; 0: one reduction after backward).
  float grad_bucket_mb = 25;
  float lr = 2e-3f;
  float min_lr_ratio = 0.1f;
  int64_t warmup = 20;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  uint64_t seed = 1;
  int threads = 0;            // 0: all cores
  std::string data;           // text file, or token dataset directory; empty: the stride task
  int64_t max_stride = 8;     // stride task: k in [1, max_stride]
  int64_t eval_prompts = 64;  // stride task: held-out prompts for generation
  int64_t prompt_len = 8;
  bool evaluate = true;  // generation / validation after training (benchmarks skip it)
  // A step whose loss or gradient norm is not finite is skipped (weights, moments and FP8
  // state untouched); this many in a row stop the run with an error.
  int64_t max_skipped_steps = 10;
  // FP8 runs: a GEMM whose FP8 output goes non-finite, or whose slots keep saturating, moves to
  // BF16 for the rest of the run (`--fp8-fallback auto`, the default; `off` to disable).
  bool fp8_fallback = true;
  // GEMMs kept in BF16 inside FP8 (TE's CustomRecipe with identity quantizers for chosen
  // modules): comma-separated glob patterns over GEMM names ("layers.0.*,*.fc2"), and the
  // shortcut first-last-layers (Megatron's --first-last-layers-bf16). Empty: none.
  std::string precision_map;

  void validate() const;  // throws Error naming the flag
  int64_t sequences_per_step() const { return batch_size * grad_accum; }
};

struct StepStats {
  int64_t step = 0, total = 0;
  float loss = 0, lr = 0, grad_norm = 0;
  double seconds = 0, tokens_per_s = 0;    // cumulative over the run
  double step_tokens_per_s = 0;            // this step alone
  bool skipped = false;                    // not finite: no update was made
  int64_t skipped_steps = 0;               // skipped so far in the run
  std::vector<Fp8Fallback> fp8_fallbacks;  // GEMMs that fell back to BF16 in this step
  // Data parallel: this step's time in collectives (waiting for other ranks included), the
  // bytes this rank reduced, and the step's own time.
  double comm_seconds = 0;
  uint64_t comm_bytes = 0;
  double step_seconds = 0;
  // The held-out loss, on the steps `fp8lm train` measures it (Training::step: every 20th and
  // the last); empty on the others.
  std::optional<double> val_loss;
};

struct TrainResult {
  PrecisionChoice precision;
  int64_t steps = 0;
  double seconds = 0, tokens_per_s = 0;
  float final_loss = 0;  // mean of the last 50 steps' finite losses
  int64_t skipped_steps = 0;
  std::vector<Fp8Fallback> fp8_fallbacks;  // every GEMM that fell back to BF16, in order
  bool stride_task = true;
  double stride_accuracy = 0;  // stride task
  float val_loss = 0;          // text
  std::string sample;          // text: a greedy sample
  std::vector<float> losses;
  // Why the run did not end well, empty when it did: it ended on skipped steps (final_loss is
  // then NaN), its weights or its validation loss are not finite.
  std::string failure;
};

}  // namespace fp8lm
