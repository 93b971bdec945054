#pragma once
// The shortened stride demo the training tests share (CPU and GPU): learns in seconds, and
// every GEMM dimension is a multiple of 16, as FP8 GEMMs on a GPU need.
#include "train/trainer.h"

namespace fp8lm::test {

inline TrainConfig small_stride_demo() {
  TrainConfig c;
  c.model = {.vocab = 32, .seq_len = 16, .d_model = 64, .n_layers = 2, .n_heads = 4, .ffn = 128};
  c.steps = 150;
  c.batch_size = 16;
  c.lr = 3e-3f;
  c.warmup = 10;
  c.max_stride = 4;
  c.eval_prompts = 32;
  c.prompt_len = 4;
  c.threads = 2;
  return c;
}

}  // namespace fp8lm::test
