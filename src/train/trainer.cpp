#include "train/trainer.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "train/adamw.h"
#include "train/data.h"

namespace fp8lm {

void TrainConfig::validate() const {
  model.validate();
  recipe.delayed.validate();
  if (steps <= 0) throw Error(fmt::format("--steps {} must be positive", steps));
  if (batch_size <= 0) throw Error(fmt::format("--batch-size {} must be positive", batch_size));
  if (!(lr > 0.0f)) throw Error(fmt::format("--lr {} must be positive", lr));
  if (threads < 0) throw Error(fmt::format("--threads {} must be 0 (all cores) or more", threads));
  if (data.empty() && prompt_len + 1 > model.seq_len) {
    throw Error(fmt::format("--seq-len {} leaves no room to generate after a {}-token prompt",
                            model.seq_len, prompt_len));
  }
  if (fp8_weights && precision != Precision::Fp8) {
    throw Error("--fp8-weights needs --precision fp8");
  }
  if (!data.empty() && model.vocab < 256) {
    throw Error(fmt::format("--vocab {} is too small for byte-level text (needs 256)", model.vocab));
  }
}

namespace {

// Greedy generation from held-out prompts (a different random stream from training):
// the fraction of generated tokens that continue each prompt's stride.
double stride_accuracy(GPT& model, const TrainConfig& cfg) {
  StrideTask heldout(cfg.model.vocab, cfg.max_stride, cfg.seed ^ 0x9e3779b97f4a7c15ull);
  const int64_t B = cfg.eval_prompts, P = cfg.prompt_len, n_new = cfg.model.seq_len - P;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> flat;
  for (int64_t b = 0; b < B; ++b) {
    const auto [a, k] = heldout.draw();
    prompts.push_back(heldout.sequence(a, k, P));
    flat.insert(flat.end(), prompts.back().begin(), prompts.back().end());
  }
  const std::vector<int32_t> out = model.generate(flat.data(), B, P, n_new);
  int64_t kept = 0;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t> gen(out.begin() + b * n_new, out.begin() + (b + 1) * n_new);
    const auto ok = StrideTask::continues_stride(prompts[static_cast<size_t>(b)], gen, cfg.model.vocab);
    kept += std::count(ok.begin(), ok.end(), true);
  }
  return static_cast<double>(kept) / static_cast<double>(B * n_new);
}

}  // namespace

TrainResult train(const TrainConfig& cfg, const ProgressFn& progress, std::unique_ptr<GPT>* model_out) {
  cfg.validate();
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  TrainResult result;
  result.precision = resolve_cpu_precision(cfg.precision, cpu_features());
  result.stride_task = cfg.data.empty();

  std::optional<StrideTask> stride;
  std::optional<TextData> text;
  if (result.stride_task) {
    stride.emplace(cfg.model.vocab, cfg.max_stride, cfg.seed);
  } else {
    text.emplace(cfg.data, cfg.model.seq_len, 0.1, cfg.seed);
  }

  auto model = std::make_unique<GPT>(cfg.model, cfg.seed);
  AdamW opt(model->parameters(), {.weight_decay = cfg.weight_decay});
  const Precision p = result.precision.precision;
  // Non-FP8 GEMMs run in BF16 under both bf16 and fp8 (as TE pairs fp8_autocast with BF16).
  const GemmPrecision gemm_precision(p == Precision::Fp32 ? Precision::Fp32 : Precision::Bf16);
  const bool fp8 = p == Precision::Fp8;
  const std::vector<Linear*> linears = model->linears();
  for (Linear* l : linears) l->set_fp8_weights(cfg.fp8_weights);

  const int64_t B = cfg.batch_size, T = cfg.model.seq_len;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < cfg.steps; ++step) {
    const Batch batch = stride ? stride->next(B, T) : text->next_train(B, T);
    opt.zero_grad();
    float loss;
    {
      const Autocast autocast(fp8, cfg.recipe);
      loss = model->forward(batch.tokens.data(), batch.targets.data(), B, T);
    }
    model->backward();
    const float norm = clip_grad_norm(opt.parameters(), cfg.grad_clip);
    const float lr = learning_rate(step, cfg.steps, cfg.warmup, cfg.lr, cfg.lr * cfg.min_lr_ratio);
    opt.step(lr);
    if (cfg.fp8_weights) {
      for (Linear* l : linears) l->requantize_weight(cfg.recipe);
    }
    result.losses.push_back(loss);
    if (progress) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress({step + 1, cfg.steps, loss, lr, norm, secs, static_cast<double>((step + 1) * B * T) / secs});
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.steps = cfg.steps;
  result.tokens_per_s = static_cast<double>(cfg.steps * B * T) / result.seconds;
  const size_t tail = std::min<size_t>(50, result.losses.size());
  result.final_loss = std::accumulate(result.losses.end() - static_cast<long>(tail), result.losses.end(), 0.0f) /
                      static_cast<float>(tail);

  if (cfg.evaluate) {
    const Autocast autocast(fp8, cfg.recipe);
    if (stride) {
      result.stride_accuracy = stride_accuracy(*model, cfg);
    } else {
      double sum = 0;
      int64_t n = 0;
      for (const Batch& vb : text->validation(B, T, 8)) {
        sum += model->forward(vb.tokens.data(), vb.targets.data(), vb.B, vb.T) * static_cast<double>(vb.B);
        n += vb.B;
      }
      result.val_loss = static_cast<float>(sum / static_cast<double>(n));
      const int64_t P = std::min<int64_t>(16, T / 2);
      std::vector<int32_t> prompt(text->bytes().begin() + text->train_size(),
                                  text->bytes().begin() + text->train_size() + P);
      const auto gen = model->generate(prompt.data(), 1, P, T - P);
      for (int32_t c : prompt) result.sample.push_back(static_cast<char>(c));
      for (int32_t c : gen) result.sample.push_back(static_cast<char>(c));
    }
  }
  if (model_out) *model_out = std::move(model);
  return result;
}

}  // namespace fp8lm
