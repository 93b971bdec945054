#pragma once
// How well a model does on held-out data: the stride task's generation accuracy and held-out
// batches, and the mean loss over batches (validation during training, fp8lm eval).
#include <cstdint>
#include <vector>

#include "fp8lm/train_config.h"
#include "nn/gpt.h"
#include "train/data.h"

namespace fp8lm {

// Greedy generation from cfg.eval_prompts held-out prompts (a random stream apart from
// training's): the fraction of generated tokens that continue each prompt's stride.
double stride_accuracy(GPT& model, const TrainConfig& cfg);
// The stride task's held-out loss batches: a random stream apart from training's and from the
// generation prompts, the same for every caller (validation during training, fp8lm eval).
std::vector<Batch> stride_held_out_batches(const TrainConfig& cfg, int64_t batches);
// Mean loss over batches (no gradients kept).
double mean_loss(GPT& model, const std::vector<Batch>& batches);

}  // namespace fp8lm
